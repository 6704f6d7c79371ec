// `attncheck serve`: a fork server that runs one command per request line (serve.cpp has the protocol).
#pragma once

namespace attncheck::cli {

// Reads requests from stdin until its end, runs each as `run_cli(argc, argv)` in a child forked from this
// untouched process, and answers each with one JSON line on stdout. Returns the server's exit code (0).
int serve(int (*run_cli)(int, char**));

}  // namespace attncheck::cli
