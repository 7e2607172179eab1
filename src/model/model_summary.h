// What `inspect_model info` says of a checkpoint, as a library function where tests reach it: its family, sizes,
// quantization, each group of layers' token mixer and feed-forward, and its generation cache per token.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/transformer.h"

namespace probekit::model {

struct ModelSummary {
  std::string dir;
  ModelConfig config;
  int64_t parameters = 0;
  std::string weights_dtype;
  std::string quantization;  // "none", or the method and how its weights are kept
  /// Layers that share a description, by description: "sliding window 1024, rope theta ... " -> {0, 1, 2, 4, ...}.
  std::map<std::string, std::vector<int64_t>> layer_kinds;
  CacheBytesPerToken cache_bf16;  // the generation cache per token in bf16

  /// `inspect_model info --json`'s object.
  Json to_json() const;
  /// `inspect_model info`'s lines.
  std::string to_text() const;
};

/// Reads the config and the checkpoint's headers in `dir` (no weights).
ModelSummary summarize_model(const std::string& dir);

}  // namespace probekit::model
