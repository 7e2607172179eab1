// A small random-weight checkpoint in the Gemma 3 text layout (config.json in the published layout,
// model.safetensors, tokenizer files and Gemma 3's chat template), for the built-in example and for benchmarks on
// machines where no real weights can be downloaded.
#pragma once

#include <cstdint>
#include <string>

namespace probekit::model {

struct RandomCheckpointOptions {
  std::string tokenizer_json;  // copied into the checkpoint; its vocabulary sets vocab_size
  int64_t hidden_size = 256;
  int64_t layers = 6;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 64;
  int64_t intermediate_size = 768;
  int64_t sliding_window = 64;
  uint64_t seed = 0;
  bool overwrite = false;  // replace an existing, non-empty `dir`
};

/// Writes the checkpoint into `dir` under the overwrite rule (common/outputs.h).
void write_random_checkpoint(const std::string& dir, const RandomCheckpointOptions& options);

}  // namespace probekit::model
