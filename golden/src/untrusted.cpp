// untrusted.hpp: load a file into memory, read it first in a forked child under limits, then here.
#include "untrusted.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "attncheck/budget.hpp"
#include "attncheck/cancel.hpp"
#include "attncheck/fixture.hpp"

namespace attncheck {
namespace {
std::atomic<bool> g_isolation{true};
std::atomic<double> g_read_seconds{0};
}  // namespace

void set_read_isolation(bool on) { g_isolation = on; }
void set_read_time_limit(double seconds) { g_read_seconds = seconds; }

}  // namespace attncheck

namespace attncheck::h5 {

double read_time_limit(uint64_t file_bytes) {
  const double s = g_read_seconds.load();
  return s > 0 ? s : 5.0 + double(file_bytes) / 100e6;  // a page-cache read runs at several GB/s: a wide margin
}

namespace {

thread_local const FileImage* t_image = nullptr;
thread_local ImageScope* t_scope = nullptr;  // the innermost, whose image t_image is
thread_local bool t_in_child = false;

// Reads done in a child in this process: (kind, size, hash) of the image -> "" (finished) or why it was refused.
using Key = std::tuple<std::string, size_t, size_t>;
std::mutex g_vetted_mutex;
std::map<Key, std::string> g_vetted;

Key key_of(const FileImage& img, const std::string& kind) {
  return {kind, img.bytes.size(), std::hash<std::string_view>{}(img.bytes)};
}

// What the child reports after each file: its index and how the read ended.
struct Record {
  uint32_t index;
  uint32_t status;  // kFinished or kOutOfMemory
};
constexpr uint32_t kFinished = 0, kOutOfMemory = 1;

// The child's address-space limit: what it has now (the parent's mappings, inherited) plus twice the memory
// budget and 512 MiB for HDF5's own buffers. A crafted size field then fails an allocation instead of taking the
// machine's memory. Not under AddressSanitizer, whose allocator maps terabytes of shadow and fails hard on a
// refused mapping (its own allocation limits apply there).
void limit_memory() {
#if !defined(__SANITIZE_ADDRESS__)
  unsigned long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages == 0) return;
  const double now = double(pages) * double(sysconf(_SC_PAGESIZE));
  const double cap = now + 2.0 * double(budget().max_bytes) + double(512u << 20);
  rlimit r{};
  r.rlim_cur = r.rlim_max = cap >= 1.8e19 ? RLIM_INFINITY : static_cast<rlim_t>(cap);
  setrlimit(RLIMIT_AS, &r);
#endif
}

// Reads images[from..] in turn, reporting each on `fd`; exits when done (or dies on a file that crashes HDF5).
[[noreturn]] void child(const std::vector<const FileImage*>& images, size_t from, int fd, const Reading& read) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives attncheck
  signal(SIGINT, SIG_DFL);           // attncheck's handlers only set a flag this process never looks at
  signal(SIGTERM, SIG_DFL);
  signal(SIGALRM, SIG_DFL);
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);  // a crash here is expected on a crafted file: no core dump
  limit_memory();
  g_isolation = false;  // already isolated: the readers called here read in this process
  t_in_child = true;
  for (size_t i = from; i < images.size(); ++i) {
    Record r{static_cast<uint32_t>(i), kFinished};
    try {
      const ImageScope scope(*images[i]);
      read(*images[i]);
    } catch (const std::bad_alloc&) {
      r.status = kOutOfMemory;
    } catch (...) {  // an ordinary refusal: the parent repeats the read and gets it itself
    }
    if (::write(fd, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) ::_exit(1);
  }
  ::_exit(0);  // no atexit handlers, no flush of buffers inherited from the parent
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string refusal(const FileImage& img, const std::string& what) {
  return img.path + ": file: " + what +
         "; the file is damaged or crafted (HDF5 reads run in a separate process, so attncheck itself was not "
         "affected)";
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

// One child for images[from..]; returns the index of the first image it did not report (images.size() when it
// read them all), with that image's outcome stored in `refused` when the child died or hung on it.
size_t run_child(const std::vector<const FileImage*>& images, size_t from, const Reading& read,
                 std::vector<std::string>& refused) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    throw std::runtime_error(images[from]->path + ": cannot start the process that reads it: " + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child(images, from, fds[1], read);
  }
  ::close(fds[1]);
  size_t next = from;
  auto started = std::chrono::steady_clock::now();
  Record rec{};
  size_t got = 0;  // bytes of `rec` read so far
  bool eof = false;
  while (next < images.size() && !eof) {
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, 20);  // short: a signal is noticed within 20 ms even when SA_RESTART hides it
    if (n > 0) {
      const ssize_t r = ::read(fds[0], reinterpret_cast<char*>(&rec) + got, sizeof rec - got);
      if (r == 0) eof = true;
      if (r > 0 && (got += size_t(r)) == sizeof rec) {
        got = 0;
        if (rec.status == kOutOfMemory)
          refused[rec.index] = refusal(*images[rec.index],
                                       "reading it needed more memory than the limit of twice "
                                       "the memory budget (--max-memory)");
        next = rec.index + 1;
        started = std::chrono::steady_clock::now();
      }
      continue;
    }
    const double limit = read_time_limit(images[next]->bytes.size());
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (cancel_signal() != 0 || waited > limit) {
      ::close(fds[0]);
      kill_and_reap(pid);
      throw_if_cancelled("finishing reading " + images[next]->path);
      refused[next] = refusal(*images[next], "the HDF5 library did not finish reading it within " + seconds(limit) +
                                                 " s (it loops forever on some damaged files; the reading process "
                                                 "was killed; --read-timeout sets the limit)");
      return next + 1;
    }
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (next == images.size()) return next;
  // The child ended before reporting images[next]: that file took it down.
  if (WIFSIGNALED(st))
    refused[next] = refusal(*images[next], "the HDF5 library crashed reading it (" + signal_name(WTERMSIG(st)) + ")");
  else
    refused[next] = refusal(*images[next], "the process reading it exited with status " +
                                               std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1));
  return next + 1;
}

}  // namespace

std::optional<FileImage> load_image(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  FileImage img{path, {}};
  img.bytes.resize(static_cast<size_t>(st.st_size));
  in.read(img.bytes.data(), static_cast<std::streamsize>(img.bytes.size()));
  img.bytes.resize(static_cast<size_t>(in.gcount()));  // a file that shrank meanwhile: what was there
  return img;
}

ImageScope::ImageScope(const FileImage& img, bool keep_open)
    : prev_(t_image), prev_scope_(t_scope), keep_open_(keep_open) {
  t_image = &img;
  t_scope = this;
}
ImageScope::~ImageScope() {
  if (kept_ >= 0) H5Fclose(kept_);
  t_image = prev_;
  t_scope = prev_scope_;
}
const FileImage* ImageScope::current() { return t_image; }
int64_t* ImageScope::kept_file() { return t_scope && t_scope->keep_open_ ? &t_scope->kept_ : nullptr; }
bool in_reading_child() { return t_in_child; }

std::vector<std::string> vet_in_child(const std::vector<const FileImage*>& images, const std::string& kind,
                                      const Reading& read) {
  std::vector<std::string> why(images.size());
  if (!g_isolation) return why;
  std::vector<size_t> todo;  // indices into images
  {
    const std::lock_guard<std::mutex> lock(g_vetted_mutex);
    for (size_t i = 0; i < images.size(); ++i) {
      bool known = false;
      for (const std::string& k : {kind, covering_kind(kind)}) {
        const auto it = kind.empty() ? g_vetted.end() : g_vetted.find(key_of(*images[i], k));
        if (!known && it != g_vetted.end()) why[i] = it->second, known = true;
      }
      if (!known) todo.push_back(i);
    }
  }
  if (todo.empty()) return why;
  throw_if_cancelled("reading " + images[todo.front()]->path);
  std::vector<const FileImage*> batch;
  for (size_t i : todo) batch.push_back(images[i]);
  std::vector<std::string> refused(batch.size());
  for (size_t from = 0; from < batch.size();) from = run_child(batch, from, read, refused);
  const std::lock_guard<std::mutex> lock(g_vetted_mutex);
  for (size_t j = 0; j < todo.size(); ++j) {
    why[todo[j]] = refused[j];
    if (!kind.empty()) g_vetted[key_of(*batch[j], kind)] = refused[j];
  }
  return why;
}

std::string covering_kind(const std::string& kind) {
  return kind.rfind("header", 0) == 0 ? "fixture" + kind.substr(6) : kind;
}

}  // namespace attncheck::h5
