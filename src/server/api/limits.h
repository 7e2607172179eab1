// The bounds on what one request to probe_server may ask (torch-free, so the request parser builds without
// LibTorch and is fuzzed on its own).
#pragma once

#include <cstdint>

namespace probekit::server {

/// How deep a request body may nest JSON arrays and objects. Every request nests three levels at most; the bound
/// keeps a body of 100,000 brackets from reaching code that recurses once per level.
constexpr int kMaxJsonDepth = 32;

/// What one request may ask; past a bound the request gets a 4xx naming the bound's flag.
struct Limits {
  int64_t max_body_bytes = 1 << 20;  // --max-body-bytes: a request body
  int64_t max_texts = 64;            // --max-texts: texts in one /v1/rank request
  int64_t max_tokens = 2048;         // --max-tokens: tokens of one text (or prompt)
  int64_t max_new_tokens = 256;      // --max-new-tokens: tokens one /v1/generate may ask for
  int64_t max_streams = 4;           // --max-streams: /v1/generate streams open at once
  int64_t max_queued_texts = 1024;   // --max-queued-texts: texts waiting for the device, all requests together
  double request_timeout_s = 60;     // --request-timeout: seconds a request (or a stream) may take in all
};

}  // namespace probekit::server
