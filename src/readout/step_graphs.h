// Generation's decode step (and attribution patching's passes with their backward) replayed as a CUDA graph. At
// batch 1 a step of a few-billion-parameter model is a thousand small kernels, and launching them one by one from
// the host takes longer than the GPU needs to read the weights; a graph launches them all at once. The step's shapes
// and addresses are fixed while the batch, its cache, its steering and the cache's visible slots (a multiple of 64,
// or the whole cache) stay the same: the first step of such a run goes eagerly (it also warms up the libraries'
// handles and plans), the next is captured, and the rest replay it, their inputs copied into the captured pass's
// own. A replay computes exactly what the eager step computes (the same kernels on the same shapes).
//
// Only models whose step has no host synchronisation and no data-dependent shape are captured: one device, dense
// attention and MLPs, unquantised weights, a rope that does not depend on the length. The others, and every build
// without CUDA, run each step eagerly, as does every reader after a capture failed once in the process.
// PROBEKIT_CUDA_GRAPHS=0 in the environment turns graphs off.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "model/transformer.h"

namespace probekit::readout {

class StepGraphs {
 public:
  /// A step's outputs, computed from its pass.
  using Body = std::function<std::vector<at::Tensor>(model::ForwardPass&)>;
  /// A step's outputs, computed from its input tensors alone (their shapes fixed by the key).
  using TensorBody = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
  /// What fixes a step's shapes and addresses (a generation step: epoch, batch, span, visible slots); a new value
  /// captures anew.
  using Key = std::vector<int64_t>;

  explicit StepGraphs(const model::TransformerModel& model);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  /// Whether `model`'s steps can be captured at all (see above).
  static bool supported(const model::TransformerModel& model);
  /// Turns graphs off (or back on where supported).
  void enable(bool on);
  /// Whether the step of a new key may be captured at once, once one step ran eagerly: its kernels set up nothing
  /// per shape on first use (no cuDNN attention plans), so only the libraries' handles needed that first step. A
  /// batch that changes (a stream joining or leaving) then costs one capture, not an eager step and a capture.
  void capture_new_keys_at_once(bool on) { capture_at_once_ = on; }
  bool enabled() const { return enabled_; }
  /// How many steps were captured and replayed so far.
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

  /// The outputs of `body` on `pass` (input_ids, positions, sequence_lengths and commit_tokens its inputs), run
  /// eagerly or replayed as the graph of `key`; replayed outputs are copies, the caller's to keep.
  std::vector<at::Tensor> run(const Key& key, model::ForwardPass& pass, const Body& body);
  /// The outputs of `body` on `inputs` (undefined ones stay undefined), run eagerly or replayed as the graph of
  /// `key`, whose captured body reads its own copies of the inputs.
  std::vector<at::Tensor> run(const Key& key, const std::vector<at::Tensor>& inputs, const TensorBody& body);

 private:
  struct Graph;
  std::vector<at::Tensor> capture_and_replay(const Key& key, const std::vector<at::Tensor>& inputs,
                                             const TensorBody& body);

  bool supported_ = false, enabled_ = false;
  at::Device device_;  // the model's, where the graphs run
  bool warmed_ = false;  // the current key's eager step ran
  bool warmed_up_ = false;  // some key's eager step ran: the libraries' handles exist on the side stream
  bool capture_at_once_ = false;
  std::optional<c10::Stream> side_;  // the stream of the eager first steps and the captures
  Key key_;
  std::unique_ptr<Graph> graph_;
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace probekit::readout
