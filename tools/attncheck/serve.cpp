// `attncheck serve`: a fork server for callers that run many small commands (the Python package). Starting the
// executable (dynamic linking, registries, library set-up) costs tens of milliseconds; a fork of a process that has
// done that and nothing else costs well under one. Each request runs in a fresh child forked from the untouched
// server, so it sees exactly the state a new process would: no option or cache carries over between requests.
//
// Protocol (docs/python.md#long-lived-process): one JSON object per line on stdin,
//   {"argv": ["compare", "--expected", ...], "cwd": "/dir", "env": {"NAME": "value", ...}}
// and one JSON line per request on stdout, {"rc": N, "stdout": "...", "stderr": "..."}. `cwd` and `env` (the whole
// environment of the command; without it, the server's own) are optional. `"stdin_bytes": N` says that N raw bytes
// follow the line: the command's stdin (`import -` reads tensors from it, so a small check needs no file); without it
// stdin is empty. A request that is not such an object gets rc 2 and the reason in stderr. The server ends at the end
// of its input (or of a payload cut short); a child ends with the server (PR_SET_PDEATHSIG). The child writes its own
// reply line; the server writes one only for a child that ended without (a signal), and reads the next request after
// the child ended, so replies come in the order of the requests.
#include "serve.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio_ext.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

extern char** environ;

namespace attncheck::cli {
namespace {

using json = nlohmann::json;

struct Request {
  std::vector<std::string> argv;
  std::string cwd;
  bool has_env = false;
  std::vector<std::string> env;  // NAME=value
  uint64_t stdin_bytes = 0;      // the payload that follows the line
};

Request parse_request(const std::string& line) {
  const json j = json::parse(line);  // throws json::exception (the caller answers it as a bad request)
  if (!j.is_object() || !j.contains("argv") || !j["argv"].is_array())
    throw std::invalid_argument("request: expected {\"argv\": [...]} (optional \"cwd\", \"env\")");
  Request r;
  for (const auto& a : j["argv"]) {
    if (!a.is_string()) throw std::invalid_argument("request: argv: every argument must be a string, got " + a.dump());
    r.argv.push_back(a.get<std::string>());
  }
  if (j.contains("cwd")) {
    if (!j["cwd"].is_string()) throw std::invalid_argument("request: cwd: must be a string, got " + j["cwd"].dump());
    r.cwd = j["cwd"].get<std::string>();
  }
  if (j.contains("env")) {
    if (!j["env"].is_object()) throw std::invalid_argument("request: env: must be an object, got " + j["env"].dump());
    r.has_env = true;
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        throw std::invalid_argument("request: env: '" + k + "' must be a name (no '=') with a string value");
      r.env.push_back(k + "=" + v.get<std::string>());
    }
  }
  if (j.contains("stdin_bytes")) {
    if (!j["stdin_bytes"].is_number_unsigned())
      throw std::invalid_argument("request: stdin_bytes: must be a non-negative integer, got " +
                                  j["stdin_bytes"].dump());
    r.stdin_bytes = j["stdin_bytes"].get<uint64_t>();
  }
  return r;
}

// The payload of a request as a file the child reads as its stdin: an in-memory file, so a payload of any size
// needs neither a temporary file nor a writer running beside the child. Returns -1 when the input ends first.
int payload_file(uint64_t n) {
  const int fd = memfd_create("attncheck-stdin", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  char buf[65536];
  while (n > 0) {
    const std::streamsize want = std::streamsize(std::min<uint64_t>(n, sizeof buf));
    std::cin.read(buf, want);
    const std::streamsize got = std::cin.gcount();
    if (got <= 0 || write(fd, buf, size_t(got)) != got) {
      close(fd);
      return -1;
    }
    n -= uint64_t(got);
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

// The whole content of an output file (a child's captured stdout or stderr).
std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return s;
    s.append(buf, size_t(n));
    at += n;
  }
}

bool write_all(int fd, const std::string& s) {
  for (size_t sent = 0; sent < s.size();) {
    const ssize_t k = write(fd, s.data() + sent, s.size() - sent);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    sent += size_t(k);
  }
  return true;
}

std::string reply_line(int rc, const std::string& out, const std::string& err) {
  const json j = {{"rc", rc}, {"stdout", out}, {"stderr", err}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

// One page shared by the server and every child: a child that has written its reply says so here, so the server
// answers only for a child that could not (it ended by a signal, or exited inside the command).
struct Shared {
  std::atomic<int> replied{0};
};

// A child: its stdout and stderr are in-memory files the server also holds; it answers the caller itself.
struct Child {
  pid_t pid = -1;
  int control = -1, out = -1, err = -1;
};

// In the child: stdin from the payload (else /dev/null), stdout and stderr into the output files, the request's
// directory and environment, then the command as a fresh process would run it. The child writes the reply line to
// the caller itself (`reply_fd`, the server's stdout), so the caller does not wait for the server to wake up, nor
// for the child's exit (unmapping a process that has loaded every library takes a fraction of a millisecond).
[[noreturn]] void run_child(const Request& r, int in_fd, const Child& c, int reply_fd, Shared* shared,
                            int (*run_cli)(int, char**)) {
  const int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
  if (in >= 0) dup2(in, 0);
  __fpurge(stdin);  // what the server had read ahead of its input (the next requests) is not this command's stdin
  dup2(c.out, 1);
  dup2(c.err, 2);
  if (!r.cwd.empty() && chdir(r.cwd.c_str()) != 0) {
    std::fprintf(stderr, "attncheck: error: cwd: cannot enter '%s': %s\n", r.cwd.c_str(), std::strerror(errno));
    std::fflush(stderr);
    _exit(2);  // the server answers with what the child wrote
  }
  if (r.has_env) {
    clearenv();
    for (const auto& kv : r.env) putenv(const_cast<char*>(kv.c_str()));  // lives until _exit
  }
  std::vector<std::string> args{"attncheck"};
  args.insert(args.end(), r.argv.begin(), r.argv.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = run_cli(static_cast<int>(args.size()), argv.data());
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  if (write_all(reply_fd, reply_line(rc, read_all(c.out), read_all(c.err)))) shared->replied = 1;
  _exit(rc);
}

// Sends the request line (length first) and, when the request has one, the payload's file descriptor.
bool hand_over(int control, const std::string& line, int in_fd) {
  const uint64_t n = line.size();
  iovec iov[2] = {{const_cast<uint64_t*>(&n), sizeof n}, {const_cast<char*>(line.data()), line.size()}};
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = iov, m.msg_iovlen = 2;
  if (in_fd >= 0) {
    m.msg_control = space, m.msg_controllen = sizeof space;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &in_fd, sizeof(int));
  }
  const ssize_t sent = sendmsg(control, &m, 0);
  if (sent < ssize_t(sizeof n)) return false;
  return write_all(control, line.substr(size_t(sent) - sizeof n));  // what did not fit in the first message
}

// In a spare child: waits for its request; the server's end (no request) ends it quietly.
[[noreturn]] void await_request(const Child& c, int reply_fd, Shared* shared, int (*run_cli)(int, char**)) {
  uint64_t n = 0;
  iovec iov{&n, sizeof n};
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov, m.msg_iovlen = 1, m.msg_control = space, m.msg_controllen = sizeof space;
  ssize_t got;
  while ((got = recvmsg(c.control, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (got != ssize_t(sizeof n)) _exit(0);
  int in_fd = -1;
  if (const cmsghdr* h = CMSG_FIRSTHDR(&m); h && h->cmsg_type == SCM_RIGHTS)
    std::memcpy(&in_fd, CMSG_DATA(h), sizeof(int));
  std::string line(n, '\0');
  for (size_t have = 0; have < n;) {
    const ssize_t k = read(c.control, line.data() + have, n - have);
    if (k <= 0) _exit(0);
    have += size_t(k);
  }
  close(c.control);
  run_child(parse_request(line), in_fd, c, reply_fd, shared, run_cli);
}

void close_child(Child& c) {
  for (int fd : {c.control, c.out, c.err})
    if (fd >= 0) close(fd);
  c = Child{};
}

// A child forked before its request comes: the fork (copying the page tables of a process that has loaded every
// library) is paid while the previous command runs, not while the caller waits. It is forked from the untouched
// server like any child, so it starts as fresh.
Child fork_spare(Shared* shared, int (*run_cli)(int, char**)) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  Child c{-1, sv[0], memfd_create("attncheck-stdout", MFD_CLOEXEC), memfd_create("attncheck-stderr", MFD_CLOEXEC)};
  if (c.out < 0 || c.err < 0) {
    close(sv[1]);
    close_child(c);
    return {};
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int reply_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);  // the caller's end; fd 1 becomes the command's stdout
    close(sv[0]);
    await_request(Child{0, sv[1], c.out, c.err}, reply_fd, shared, run_cli);
  }
  close(sv[1]);
  if (pid < 0) {
    close_child(c);
    return {};
  }
  c.pid = pid;
  return c;
}

// Waits for a child to end; answers for it when it could not answer itself.
void finish(Child& c, Shared* shared) {
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!shared->replied) {
    std::string err = read_all(c.err);
    int rc = 2;
    if (WIFEXITED(status)) rc = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
      err += "attncheck serve: the command was ended by signal " + std::to_string(WTERMSIG(status)) + "\n";
      rc = 128 + WTERMSIG(status);
    }
    std::fputs(reply_line(rc, read_all(c.out), err).c_str(), stdout);
    std::fflush(stdout);
  }
  close_child(c);
}

}  // namespace

int serve(int (*run_cli)(int, char**)) {
  signal(SIGPIPE, SIG_IGN);  // a spare child that died is seen as a failed send, not as the server's end
  void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  Shared* shared = new (page) Shared;
  Child spare = fork_spare(shared, run_cli);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const Request r = parse_request(line);
      const int in_fd = r.stdin_bytes > 0 ? payload_file(r.stdin_bytes) : -1;
      if (r.stdin_bytes > 0 && in_fd < 0) break;  // the input ended inside the payload: nobody is left to answer
      struct Closer {
        int fd;
        ~Closer() {
          if (fd >= 0) close(fd);
        }
      } payload{in_fd};
      if (spare.pid < 0) spare = fork_spare(shared, run_cli);
      if (spare.pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      Child child = spare;
      spare = Child{};
      shared->replied = 0;
      if (!hand_over(child.control, line, in_fd)) kill(child.pid, SIGKILL);
      close(child.control);
      child.control = -1;
      spare = fork_spare(shared, run_cli);  // while this command runs
      finish(child, shared);                // one command at a time: replies keep the order of the requests
    } catch (const std::exception& e) {     // a malformed request, or no process for it
      std::fputs(reply_line(2, "", std::string("attncheck serve: error: ") + e.what() + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (spare.pid >= 0) {  // the spare reads the end of its control socket and leaves
    const pid_t pid = spare.pid;
    close_child(spare);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return 0;
}

}  // namespace attncheck::cli
