// A GPU's first forward pass pays one-time set-up that has nothing to do with its text: the kernels CUDA loads
// on their first launch (LibTorch's, cuBLAS's, the flash kernel's, ours) and the libraries' handles and plans,
// about a third of a second on an H200, where the text's own work takes a hundredth. A whole-process run
// (multi_probe_inference --text) would pay it after the model's load; rehearsing the pass on a stand-in of the
// model's first layer pays it during the load instead.
#pragma once

#include <functional>
#include <future>
#include <string>

#include "model/transformer.h"
#include "readout/readout.h"

namespace probekit::readout {

/// Starts, on a thread of its own, a pass of a few tokens through a stand-in of the model in `dir`: its first
/// decoder layer loaded again, apart, with `load`'s device, dtype and embeddings, read at layer 0 as `request` reads
/// (its site where layer 0 has it, else the residual stream), the rows [1, 1, width] then given to `use_rows` (the
/// caller's own first use of rows: its probes). The future is ready when that is done and the stand-in freed; it
/// never throws (a rehearsal that fails only leaves the set-up to the first real pass).
std::future<void> rehearse_first_pass(const std::string& dir, model::LoadOptions load, Request request,
                                      std::function<void(const at::Tensor&)> use_rows = {});

}  // namespace probekit::readout
