#include "capture/batch_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

namespace probekit::capture {

namespace {


// Peak bytes per token of one layer's activations on a GPU (CUDA, ROCm or MPS): residual, norms, qkv, attention
// scores, MLP, and with routed experts the token's k copies through its experts and their fp32 sum.
int64_t gpu_bytes_per_token(const model::ModelConfig& c, at::ScalarType dtype, int64_t longest, int64_t layer_count) {
  auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const model::RoutedExpertsSpec& moe = c.routed_experts;
  return element * (6 * c.hidden_size + 2 * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim + 4 * c.intermediate_size +
                    c.num_heads * longest + moe.top_k * (2 * c.hidden_size + 3 * moe.intermediate_size)) +
         4 * (moe.experts + moe.top_k * c.hidden_size) + 12 * c.hidden_size * (layer_count + 1);
}

// The token ids of run positions `part`.
std::vector<readout::Sequence> sequences_of(const std::vector<int64_t>& part, const CapturePlan& plan) {
  std::vector<readout::Sequence> sequences;
  sequences.reserve(part.size());
  for (int64_t p : part) sequences.push_back(plan.ids[static_cast<size_t>(p)]);
  return sequences;
}

// Their conversations' token masks (none for texts).
std::vector<std::vector<uint8_t>> masks_of(const std::vector<int64_t>& part, const CapturePlan& plan) {
  std::vector<std::vector<uint8_t>> masks;
  if (plan.masks.empty()) return masks;
  for (int64_t p : part) masks.push_back(plan.masks[static_cast<size_t>(p)]);
  return masks;
}

}  // namespace

Batching choose_batching(const CaptureOptions& options, const model::TransformerModel& model,
                         const readout::Request& request, const device::ComputeTarget& target, const CapturePlan& plan,
                         int64_t first_device_weights, size_t replica_count) {
  const model::ModelConfig& c = model.config();
  const auto layer_count = static_cast<int64_t>(plan.layers.size());
  Batching b;
  int64_t longest = *std::max_element(plan.lengths.begin(), plan.lengths.end());
  if (options.batch_size > 0) {
    b.max_examples = options.batch_size;
    b.token_budget = options.batch_size * longest;
  } else if (device::MemoryBudget memory = device::memory_budget(target.choice.backend, target.memory(),
                                                                  options.max_gpu_memory, first_device_weights);
             memory.bytes > 0) {
    auto usable = static_cast<int64_t>(memory.bytes / 2);
    b.token_budget = std::clamp<int64_t>(usable / gpu_bytes_per_token(c, target.dtype, longest, layer_count), longest, 32768);
    b.max_examples = 512;
    spdlog::info("batches of up to {} tokens, from half of the memory there is ({})", b.token_budget, memory.source);
  } else {
    b.token_budget = std::max<int64_t>(4096, longest);
    b.max_examples = 64;
  }
  // Packed batches of last or per-token rows compute and hold only their own tokens (mean and max pooling pad
  // each layer's values to pool them), so those batches fill the budget with real tokens: 14 batches for the
  // 4,500 benchmark texts where padded accounting cut 18 of ~23,700 tokens (1.4-1.6% more examples/s on an H200).
  // Not for replicas, which share the windows' batches: with three larger batches a window two H200s reached
  // 1.86-1.95x one GPU, against 1.94-1.98x with the smaller ones.
  b.packed = replica_count == 1 && (request.position == Position::kLast || request.position == Position::kAll) &&
             readout::packs_sequences(model, request);
  // Rows are buffered per window; per-token rows are large, so their windows are smaller.
  b.window = options.window;
  if (request.position == Position::kAll) {
    double mean_length = 0;
    for (int64_t length : plan.lengths) mean_length += static_cast<double>(length);
    mean_length /= static_cast<double>(plan.lengths.size());
    double row_bytes = 4.0 * static_cast<double>(plan.width * layer_count) * mean_length;
    b.window = std::clamp<int64_t>(static_cast<int64_t>((512.0 * (1 << 20)) / row_bytes), 1, options.window);
  }
  return b;
}

int64_t BatchRunner::computed_tokens(const std::vector<int64_t>& batch, const CapturePlan& plan) const {
  if (readout::packs_sequences(model_, request_)) {
    int64_t tokens = 0;
    for (int64_t p : batch) tokens += plan.lengths[static_cast<size_t>(p)];
    return tokens;
  }
  return static_cast<int64_t>(batch.size()) * plan.lengths[static_cast<size_t>(batch.front())];  // longest first
}

at::Tensor BatchRunner::run(const std::vector<int64_t>& batch, const CapturePlan& plan,
                            device::OutOfMemoryRetry& retry) const {
  std::vector<at::Tensor> pieces;
  device::run_in_halves(
      batch,
      [&](const std::vector<int64_t>& part) {
        if (simulate_out_of_memory_above_ > 0 && static_cast<int64_t>(part.size()) > simulate_out_of_memory_above_) {
          throw std::runtime_error("CUDA out of memory (simulated for a test)");
        }
        pieces.push_back(readout::read_rows(model_, sequences_of(part, plan), request_, masks_of(part, plan)));
      },
      retry);
  return pieces.size() == 1 ? pieces.front() : at::cat(pieces);
}

void BatchRunner::warm_up(const std::vector<int64_t>& batch, const CapturePlan& plan,
                          device::OutOfMemoryRetry& retry) const {
  readout::Request first_layer = request_;
  first_layer.site = Site::kResidPost;  // every layer has it
  first_layer.layers = {0};
  first_layer.latents = nullptr;  // the SAE runs in the second warm-up read
  device::run_in_halves(
      batch,
      [&](const std::vector<int64_t>& part) { readout::read_rows(model_, sequences_of(part, plan), first_layer); },
      retry);
  readout::read_rows(model_, {plan.ids[static_cast<size_t>(batch.front())]}, request_);
  for (const at::Device& device : devices_) device::synchronize(device);
}

}  // namespace probekit::capture
