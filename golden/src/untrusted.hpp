// Reading files that are not known to be good. HDF5 1.10 (and the 1.12/1.14 releases before their fixes for the
// global heap, variable-length and B-tree CVEs) can crash or loop forever inside the library on a crafted file,
// before any of our checks sees a value. So every read of an HDF5 file runs first in a forked child process on an
// in-memory copy of the file, with limits on time and memory; a crash, a hang or an exhausted limit there becomes
// std::invalid_argument naming the file, and only a read that finished in the child is repeated here, on the same
// bytes (the child is a fork, so it starts from exactly this process's state: the repeat does the same work).
// docs/hardening.md "Untrusted HDF5 files".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck::h5 {

// The bytes of one regular file; Reader::open_file opens them (HDF5's core driver) instead of the path while an
// ImageScope for that path lives on this thread.
struct FileImage {
  std::string path;
  std::string bytes;
};

// nullopt when `path` is not a regular file that can be read (Reader::open_file then reports why, without
// parsing anything).
std::optional<FileImage> load_image(const std::string& path);

// With `keep_open`, the first Reader::open_file of the image that succeeds keeps the file open until the scope
// ends, and later ones get a new reference to that same open file instead of opening it again: for a process
// that reads one file's bytes several ways (the fuzz target reads each input as a fixture header, a fixture and
// a candidate), where opening dominated. Without it (attncheck itself), every reader opens the file afresh.
class ImageScope {
 public:
  explicit ImageScope(const FileImage& img, bool keep_open = false);
  ~ImageScope();
  ImageScope(const ImageScope&) = delete;
  ImageScope& operator=(const ImageScope&) = delete;
  static const FileImage* current();
  // The open file (an HDF5 id) kept by the innermost scope, -1 when none is kept yet; nullptr when that scope
  // does not keep its file open (or there is none).
  static int64_t* kept_file();

 private:
  const FileImage* prev_;
  ImageScope* prev_scope_;
  bool keep_open_;
  int64_t kept_ = -1;
};

// True in the child: a reader may leave out work on values already read (no HDF5 call), which the parent repeats.
bool in_reading_child();

// What is done with one image (an ImageScope for it is live while it runs).
using Reading = std::function<void(const FileImage&)>;

// Runs `read` on each image in a forked child, one child for all of them (a new one after a file that killed or
// hung the previous one). Returns, per image, "" when the child finished the read (whether it returned or threw an
// ordinary exception: the caller repeats it here and gets the same result), else the message of
// std::invalid_argument "<file>: file: ..." saying it crashed, hung past read_time_limit or ran out of memory.
// Throws Cancelled when SIGINT or SIGTERM arrives meanwhile (the child is killed). `kind` names what `read` does
// (and every option it depends on): the outcome of a kind for the same bytes is kept for the rest of the process
// and not computed again; an empty kind is never kept. A "fixture..." outcome also answers "header..." (the header
// read is the first part of the full read).
std::vector<std::string> vet_in_child(const std::vector<const FileImage*>& images, const std::string& kind,
                                      const Reading& read);
std::string covering_kind(const std::string& kind);

// The time limit of one read: set_read_time_limit's, else 5 s plus 1 s per 100 MB of the file.
double read_time_limit(uint64_t file_bytes);

// The whole pattern: load, vet, read here. Files that cannot be loaded go straight to `read`, and so do reads
// inside an ImageScope of the same file (the child's own, or the repeat here of a read already vetted).
template <class F>
auto untrusted_read(const std::string& path, const std::string& kind, F&& read) -> decltype(read()) {
  if (const FileImage* cur = ImageScope::current(); cur && cur->path == path) return read();
  const std::optional<FileImage> img = load_image(path);
  if (!img) return read();
  const ImageScope scope(*img);
  const std::string why = vet_in_child({&*img}, kind, [&](const FileImage&) { (void)read(); }).front();
  if (!why.empty()) throw std::invalid_argument(why);
  return read();
}

}  // namespace attncheck::h5
