// write_file_durably: temporary + write + fsync + rename + directory fsync, with cleanup of the temporaries of
// dead processes. POSIX only (like the rest of the harness).
#include "attncheck/durable_file.hpp"

#include "attncheck/cancel.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace attncheck {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kMarker = ".attncheck-", kSuffix = ".tmp";

[[noreturn]] void fail(const std::string& path, const std::string& step, int err) {
  throw std::runtime_error(path + ": " + step + " failed: " + std::strerror(err));
}

std::string dir_of(const fs::path& p) {
  const fs::path d = p.parent_path();
  return d.empty() ? "." : d.string();
}

// The PID in ".NAME.attncheck-PID.tmp", or -1 when `name` is not one of our temporaries.
long temp_pid(const std::string& name) {
  if (name.size() < 2 || name[0] != '.' || !name.ends_with(kSuffix)) return -1;
  const size_t m = name.rfind(kMarker);
  if (m == std::string::npos || m == 0) return -1;
  const std::string digits = name.substr(m + kMarker.size(), name.size() - kSuffix.size() - m - kMarker.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

void fsync_dir(const std::string& dir, const std::string& path) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(path, "opening its directory " + dir + " to fsync it", errno);
  if (::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: a file system that cannot sync directories
    const int e = errno;
    ::close(fd);
    fail(path, "fsync of its directory " + dir, e);
  }
  ::close(fd);
}
}  // namespace

int remove_stale_temporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = temp_pid(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid()) continue;
    // ESRCH: no such process. EPERM means it exists (another user's): leave it.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

void write_file_durably(const std::string& path, std::string_view bytes) {
  const fs::path target(path);
  const std::string dir = dir_of(target);
  remove_stale_temporaries(dir);
  std::string name(1, '.');  // built by appending: GCC 12 warns falsely (-Wrestrict) on "." + string
  name += target.filename().string();
  name += kMarker;
  name += std::to_string(::getpid());
  name += kSuffix;
  const std::string tmp = (fs::path(dir) / name).string();
  const CancelDeferred hold;  // a second Ctrl-C waits until the temporary is renamed or removed
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "creating the temporary " + tmp, errno);
  auto give_up = [&](const std::string& step, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, step, err);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) give_up("writing the temporary " + tmp, w < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) give_up("fsync of the temporary " + tmp, errno);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "closing the temporary " + tmp, e);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "renaming the temporary " + tmp + " into place", e);
  }
  fsync_dir(dir, path);
}

}  // namespace attncheck
