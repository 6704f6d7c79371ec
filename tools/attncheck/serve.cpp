// `attncheck serve`: a fork server for callers that run many small commands (the Python package). Starting the
// executable (dynamic linking, registries, library set-up) costs tens of milliseconds; a fork of a process that has
// done that and nothing else costs well under one. Each request runs in a fresh child forked from the untouched
// server, so it sees exactly the state a new process would: no option or cache carries over between requests.
//
// Protocol (docs/python.md#long-lived-process): one JSON object per line on stdin,
//   {"argv": ["compare", "--expected", ...], "cwd": "/dir", "env": {"NAME": "value", ...}}
// and one JSON line per request on stdout, {"rc": N, "stdout": "...", "stderr": "..."}. `cwd` and `env` (the whole
// environment of the command) are optional. A request that is not such an object gets rc 2 and the reason in
// stderr. The server ends at the end of its input; a child ends with the server (PR_SET_PDEATHSIG).
#include "serve.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
  return r;
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

// In the child: stdin from /dev/null, stdout and stderr into the pipes, the request's directory and environment,
// then the command as a fresh process would run it.
[[noreturn]] void run_child(const Request& r, int out_fd, int err_fd, int (*run_cli)(int, char**)) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, 0);
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

json respond(int rc, const std::string& out, const std::string& err) {
  return {{"rc", rc}, {"stdout", out}, {"stderr", err}};
}

}  // namespace

int serve(int (*run_cli)(int, char**)) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json reply;
    try {
      const Request r = parse_request(line);
      int out_pipe[2], err_pipe[2];
      if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
      std::fflush(stdout);
      const pid_t pid = fork();
      if (pid < 0) {
        for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      }
      if (pid == 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        run_child(r, out_pipe[1], err_pipe[1], run_cli);
      }
      close(out_pipe[1]);
      close(err_pipe[1]);
      std::string out, err;
      const int rc = collect(pid, out_pipe[0], err_pipe[0], out, err);
      reply = respond(rc, out, err);
    } catch (const std::exception& e) {  // a malformed request, or no pipe or process for it
      reply = respond(2, "", std::string("attncheck serve: error: ") + e.what() + "\n");
    }
    std::fputs((reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace attncheck::cli
