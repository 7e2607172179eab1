// A capture kept in memory (the Python package's model.capture): texts given in memory run through the prompts,
// batching and batch runner of capture_activations, on a model loaded already, and each layer's rows end up in one
// host tensor in the texts' order instead of a file. Nothing is held twice: on a GPU the rows gather on the device
// and come down once per layer at the end; on the CPU they are stored where they belong as each batch finishes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capture/capture_options.h"
#include "loading/model_loading.h"

namespace probekit::capture {

struct CapturedRows {
  std::vector<int64_t> layers;
  std::vector<at::Tensor> rows;   // per layer: [rows, width] fp32 on the host, text after text
  std::vector<int64_t> offsets;   // position all: text i's rows are [offsets[i], offsets[i + 1]); else empty
  int64_t truncated = 0;          // texts cut to max_length
};

/// Captures `texts` on `model` as `options` say (layers, site, position, prompt suffix, max_length, batch_size,
/// max_gpu_memory, window, steering; the dataset, output and device fields are not read). Reports progress as
/// "capture" in examples (where an interruption stops it). Errors name the text by its index.
CapturedRows capture_rows(const loading::SharedModel& model, const std::vector<std::string>& texts,
                          const CaptureOptions& options);

}  // namespace probekit::capture
