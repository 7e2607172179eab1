#include "readout/step_graphs.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "common/interrupt.h"

#ifdef PROBEKIT_WITH_CUDA
#include <torch/csrc/api/include/torch/version.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace probekit::readout {

namespace {

// Set when a capture failed: the readers after it do not try again (each failure leaves its memory pool behind).
std::atomic<bool> capture_failed{false};

bool allowed_by_environment() {
  const char* value = std::getenv("PROBEKIT_CUDA_GRAPHS");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

#ifdef PROBEKIT_WITH_CUDA

struct StepGraphs::Graph {
  at::cuda::CUDAGraph graph;
  std::vector<at::Tensor> inputs;   // the captured body's own copies of its inputs
  std::vector<at::Tensor> outputs;  // what its body returned
};

namespace {

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.defined() ? t.clone() : t);
  return out;
}

// Runs `work` on `side` (capture needs a stream other than the default one), ordered after what the current
// stream queued before and before what it queues after.
template <typename Work>
void on_side_stream(c10::cuda::CUDAStream side, Work&& work) {
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(side.device_index());
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    work();
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
}

// A reader's side stream on `device`, taken from the pool the first time it is asked for.
c10::cuda::CUDAStream side_stream(std::optional<c10::Stream>& side, at::Device device) {
  if (!side) side = c10::cuda::getStreamFromPool(false, device.index());
  return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, *side);
}

void begin_capture(at::cuda::CUDAGraph& graph) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // Thread-local: another thread's unrelated CUDA call (a server's) must not break the capture.
  graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
  graph.capture_begin();
#endif
}

}  // namespace

std::vector<at::Tensor> StepGraphs::capture_and_replay(const Key& key, const std::vector<at::Tensor>& inputs,
                                                       const TensorBody& body) {
  auto captured = std::make_unique<Graph>();
  captured->inputs = copies(inputs);
  const auto started = std::chrono::steady_clock::now();
  try {
    on_side_stream(side_stream(side_, device_), [&] {
      begin_capture(captured->graph);
      try {
        captured->outputs = body(captured->inputs);
      } catch (...) {
        try {
          captured->graph.capture_end();
        } catch (...) {
        }
        throw;
      }
      captured->graph.capture_end();
    });
  } catch (const Interrupted&) {
    (void)cudaGetLastError();
    throw;  // the work stops as asked; capturing did not fail
  } catch (const std::exception& e) {
    (void)cudaGetLastError();  // a failed capture leaves its error for the next call to find
    spdlog::warn("passes run without CUDA graphs from now on: capturing one failed ({})", e.what());
    capture_failed = true;
    enabled_ = false;
    return body(inputs);
  }
  graph_ = std::move(captured);
  key_ = key;
  ++captures_;
  spdlog::debug("captured a pass's CUDA graph ({}) in {:.1f} ms", fmt::join(key, ", "),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  graph_->graph.replay();
  ++replays_;
  return copies(graph_->outputs);
}

std::vector<at::Tensor> StepGraphs::run(const Key& key, const std::vector<at::Tensor>& inputs, const TensorBody& body) {
  if (!enabled_) return body(inputs);
  if (graph_ && key == key_) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined()) graph_->inputs[i].copy_(inputs[i]);
    }
    graph_->graph.replay();
    ++replays_;
    return copies(graph_->outputs);
  }
  if (warmed_ && key == key_) return capture_and_replay(key, inputs, body);
  graph_.reset();
  if (warmed_up_ && capture_at_once_) return capture_and_replay(key, inputs, body);
  // A new key: its first step runs eagerly on the stream the captures use, which sets up what the libraries
  // create on first use (handles, workspaces, attention plans) outside any capture.
  key_ = key;
  warmed_ = warmed_up_ = true;
  std::vector<at::Tensor> outputs;
  c10::cuda::CUDAStream side = side_stream(side_, device_);
  on_side_stream(side, [&] { outputs = body(inputs); });
  // Made on the side stream, used and freed on the current one: not reused before the current stream is done.
  for (at::Tensor& output : outputs) {
    if (output.defined()) output.record_stream(c10::cuda::getCurrentCUDAStream(side.device_index()));
  }
  return outputs;
}

#else

struct StepGraphs::Graph {};

std::vector<at::Tensor> StepGraphs::run(const Key&, const std::vector<at::Tensor>& inputs, const TensorBody& body) {
  return body(inputs);
}

#endif

std::vector<at::Tensor> StepGraphs::run(const Key& key, model::ForwardPass& pass, const Body& body) {
  auto fields = [](model::ForwardPass& p) {
    return std::vector<at::Tensor*>{&p.input_ids, &p.positions, &p.sequence_lengths, &p.commit_tokens};
  };
  std::vector<at::Tensor> inputs;
  for (at::Tensor* field : fields(pass)) inputs.push_back(*field);
  return run(key, inputs, [&](const std::vector<at::Tensor>& given) {
    model::ForwardPass fixed = pass;
    const std::vector<at::Tensor*> to_set = fields(fixed);
    for (size_t i = 0; i < to_set.size(); ++i) *to_set[i] = given[i];
    return body(fixed);
  });
}

StepGraphs::StepGraphs(const model::TransformerModel& model)
    : supported_(supported(model)),
      enabled_(supported_ && allowed_by_environment() && !capture_failed),
      device_(model.device()) {}

StepGraphs::~StepGraphs() = default;

void StepGraphs::enable(bool on) {
  enabled_ = on && supported_ && !capture_failed;
  graph_.reset();
  warmed_ = false;
}

bool StepGraphs::supported(const model::TransformerModel& model) {
#ifdef PROBEKIT_WITH_CUDA
  const model::ModelConfig& c = model.config();
  if (!model.device().is_cuda() || !model::routed_expert_layers(c).empty() || model::has_recurrent_layers(c) ||
      model::longest_short_rope_sequence(c) != 0 || !c.quantization.method.empty() || c.per_layer_input_size > 0) {
    return false;
  }
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (model.layer_device(layer) != model.device() || c.layers[static_cast<size_t>(layer)].mixer != model::Mixer::kAttention) {
      return false;
    }
  }
  return true;
#else
  (void)model;
  return false;
#endif
}

}  // namespace probekit::readout
