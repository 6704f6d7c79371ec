// `attncheck bench` as a library call: the options as given (Request), checked into a Config naming the option
// that is wrong, the implementation looked up by name, and the timed result printed as text or JSON.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench_support.hpp"

namespace attncheck::bench {

// The options as the user gave them.
struct Request {
  std::string impl, shape, dtype = "fp32", pass = "forward", kv_cache;
  int threads = 0, reps = 5, warmup = 1, num_splits = 0;  // threads 0: ATTNCHECK_THREADS or all cores
  int64_t mla_dv = 0, doc_len = 0;
  std::vector<int64_t> block_mask;  // empty, or Q_BLOCK, KV_BLOCK
  bool causal = false, json = false;
};

// The checked configuration; bad input is std::invalid_argument naming the option and the value.
Config config_of(const Request& q);

// Checks the request, finds the implementation (std::invalid_argument listing the available ones when there is
// none of that name), times it and prints the result to `out` (one JSON object with Request::json). Returns 0.
int run_request(const Request& q, std::FILE* out);

// The human summary of one timed run: shape, rates against the same-run SGEMM, FMA peak and bandwidth, CPU time,
// peak memory.
void print_text(std::FILE* out, const std::string& impl, const Config& c, const Result& r);

}  // namespace attncheck::bench
