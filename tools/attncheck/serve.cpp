// `attncheck serve`: a fork server for callers that run many small commands (the Python package). Starting the
// executable (dynamic linking, registries, library set-up) costs tens of milliseconds; a fork of a process that has
// done that and nothing else costs well under one. Each request runs in a fresh child forked from the untouched
// server, so it sees exactly the state a new process would: no option or cache carries over between requests.
//
// Protocol (docs/python.md#long-lived-process): one JSON object per line on stdin,
//   {"argv": ["compare", "--expected", ...], "cwd": "/dir", "env": {"NAME": "value", ...}}
// and one JSON line per request on stdout, {"rc": N, "stdout": "...", "stderr": "..."}. `cwd` and `env` (the whole
// environment of the command) are optional. `"stdin_bytes": N` says that N raw bytes follow the line: the command's
// stdin (`import -` reads tensors from it, so a small check needs no file); without it stdin is empty. A request
// that is not such an object gets rc 2 and the reason in stderr. The server ends at the end of its input (or of a
// payload cut short); a child ends with the server (PR_SET_PDEATHSIG).
#include "serve.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio_ext.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
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
      throw std::invalid_argument("request: stdin_bytes: must be a non-negative integer, got " + j["stdin_bytes"].dump());
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

// Reads both pipes to their ends (a child may fill one while the other is empty) and reaps the child.
int collect(pid_t pid, int out_fd, int err_fd, std::string& out, std::string& err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[k]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    err += "attncheck serve: the command was ended by signal " + std::to_string(WTERMSIG(status)) + "\n";
    return 128 + WTERMSIG(status);
  }
  return 2;
}

// In the child: stdin from the payload (else /dev/null), stdout and stderr into the pipes, the request's directory and environment,
// then the command as a fresh process would run it.
[[noreturn]] void run_child(const Request& r, int in_fd, int out_fd, int err_fd, int (*run_cli)(int, char**)) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
  if (in >= 0) dup2(in, 0);
  __fpurge(stdin);  // what the server had read ahead of its input (the next requests) is not this command's stdin
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  if (!r.cwd.empty() && chdir(r.cwd.c_str()) != 0) {
    std::fprintf(stderr, "attncheck: error: cwd: cannot enter '%s': %s\n", r.cwd.c_str(), std::strerror(errno));
    _exit(2);
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
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);
}

// A child forked before its request comes: the fork (copying the page tables of a process that has loaded every
// library) is paid while the caller reads the previous reply, not while it waits for this one. It is forked from
// the untouched server like any child, so it starts as fresh. `control` carries the request line and its stdin.
struct Spare {
  pid_t pid = -1;
  int control = -1, out = -1, err = -1;
};

// Sends the request line (length first) and, when the request has one, the payload's file descriptor.
bool hand_over(int control, const std::string& line, int in_fd) {
  const uint64_t n = line.size();
  iovec iov{const_cast<uint64_t*>(&n), sizeof n};
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov, m.msg_iovlen = 1;
  if (in_fd >= 0) {
    m.msg_control = space, m.msg_controllen = sizeof space;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &in_fd, sizeof(int));
  }
  if (sendmsg(control, &m, 0) != ssize_t(sizeof n)) return false;
  for (size_t sent = 0; sent < line.size();) {
    const ssize_t k = write(control, line.data() + sent, line.size() - sent);
    if (k <= 0) return false;
    sent += size_t(k);
  }
  return true;
}

// In the spare: waits for its request; the server's end (no request) ends it quietly.
[[noreturn]] void await_request(int control, int out_fd, int err_fd, int (*run_cli)(int, char**)) {
  uint64_t n = 0;
  iovec iov{&n, sizeof n};
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov, m.msg_iovlen = 1, m.msg_control = space, m.msg_controllen = sizeof space;
  ssize_t got;
  while ((got = recvmsg(control, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (got != ssize_t(sizeof n)) _exit(0);
  int in_fd = -1;
  if (const cmsghdr* c = CMSG_FIRSTHDR(&m); c && c->cmsg_type == SCM_RIGHTS) std::memcpy(&in_fd, CMSG_DATA(c), sizeof(int));
  std::string line(n, '\0');
  for (size_t have = 0; have < n;) {
    const ssize_t k = read(control, line.data() + have, n - have);
    if (k <= 0) _exit(0);
    have += size_t(k);
  }
  close(control);
  run_child(parse_request(line), in_fd, out_fd, err_fd, run_cli);
}

Spare fork_spare(int (*run_cli)(int, char**)) {
  int sv[2], out_pipe[2], err_pipe[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(sv[0]), close(sv[1]);
    return {};
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    for (int fd : {sv[0], sv[1], out_pipe[0], out_pipe[1]}) close(fd);
    return {};
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd : {sv[0], out_pipe[0], err_pipe[0]}) close(fd);
    await_request(sv[1], out_pipe[1], err_pipe[1], run_cli);
  }
  for (int fd : {sv[1], out_pipe[1], err_pipe[1]}) close(fd);
  if (pid < 0) {
    for (int fd : {sv[0], out_pipe[0], err_pipe[0]}) close(fd);
    return {};
  }
  return {pid, sv[0], out_pipe[0], err_pipe[0]};
}

json respond(int rc, const std::string& out, const std::string& err) {
  return {{"rc", rc}, {"stdout", out}, {"stderr", err}};
}

}  // namespace

int serve(int (*run_cli)(int, char**)) {
  signal(SIGPIPE, SIG_IGN);  // a spare child that died is seen as a failed send, not as the server's end
  Spare spare = fork_spare(run_cli);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json reply;
    try {
      const Request r = parse_request(line);
      const int in_fd = r.stdin_bytes > 0 ? payload_file(r.stdin_bytes) : -1;
      if (r.stdin_bytes > 0 && in_fd < 0) break;  // the input ended inside the payload: nobody is left to answer
      struct Closer {
        int fd;
        ~Closer() { if (fd >= 0) close(fd); }
      } payload{in_fd};
      if (spare.pid < 0) spare = fork_spare(run_cli);
      if (spare.pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      Spare child = spare;
      spare = Spare{};
      if (!hand_over(child.control, line, in_fd)) kill(child.pid, SIGKILL);
      close(child.control);
      std::string out, err;
      const int rc = collect(child.pid, child.out, child.err, out, err);
      reply = respond(rc, out, err);
    } catch (const std::exception& e) {  // a malformed request, or no pipe or process for it
      reply = respond(2, "", std::string("attncheck serve: error: ") + e.what() + "\n");
    }
    std::fputs((reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n").c_str(), stdout);
    std::fflush(stdout);
    if (spare.pid < 0) spare = fork_spare(run_cli);  // while the caller reads the reply
  }
  if (spare.pid >= 0) {  // the spare reads the end of its control socket and leaves
    close(spare.control);
    close(spare.out);
    close(spare.err);
    while (waitpid(spare.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return 0;
}

}  // namespace attncheck::cli
