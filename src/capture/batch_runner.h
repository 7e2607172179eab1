// The run stage of a capture: how batches are sized from the device's memory (a model of the GPU memory a token
// takes), and the runner that reads a batch's rows on one model copy through the readout, retrying a batch that runs
// out of device memory in halves.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "capture/batching.h"
#include "capture/plan.h"
#include "device/torch/gpu_utils.h"
#include "model/transformer.h"
#include "readout/readout.h"

namespace probekit::capture {

/// The batching of a run: a token budget from half the memory there is (or --batch-size), packed batches where the
/// readout packs, and windows small enough for per-token rows. `request`: what the run reads; `first_device_weights`:
/// the bytes of weights on the model's first device (a split model holds part there); `replica_count`: the model
/// copies that share the run.
Batching choose_batching(const CaptureOptions& options, const model::TransformerModel& model,
                         const readout::Request& request, const device::ComputeTarget& target, const CapturePlan& plan,
                         int64_t first_device_weights, size_t replica_count);

// Runs batches on one model replica through the readout; a batch that runs out of device memory is split in
// halves and retried (device::run_in_halves).
class BatchRunner {
 public:
  BatchRunner(const model::TransformerModel& model, std::vector<at::Device> devices, readout::Request request,
              int64_t simulate_out_of_memory_above)
      : model_(model), devices_(std::move(devices)), request_(std::move(request)),
        simulate_out_of_memory_above_(simulate_out_of_memory_above) {}

  /// The devices the model's layers are on, first to last.
  const std::vector<at::Device>& devices() const { return devices_; }
  const model::TransformerModel& model() const { return model_; }

  /// Positions a forward pass over `batch` computes: its tokens when packed, else the padded rectangle.
  int64_t computed_tokens(const std::vector<int64_t>& batch, const CapturePlan& plan) const;

  /// Rows of a batch of run positions [rows, layers, width] in fp32 on the device.
  at::Tensor run(const std::vector<int64_t>& batch, const CapturePlan& plan, device::OutOfMemoryRetry& retry) const;

  /// Runs `batch` through the first layer (in halves where it runs out of memory, as run() would), for the
  /// products' kernels at its size, and its first text through every requested layer, for the rest (a global
  /// attention layer's kernel is not a sliding one's; a split model's later devices), throws the values away and
  /// waits for the devices. CUDA loads a kernel at its first launch and cuBLAS picks an algorithm at each new
  /// product shape: 0.2-0.35 s a run before the first batch (measured), which the timed loop then does not pay
  /// and in which a replicated run's GPUs stood apart.
  void warm_up(const std::vector<int64_t>& batch, const CapturePlan& plan, device::OutOfMemoryRetry& retry) const;

 private:
  const model::TransformerModel& model_;
  std::vector<at::Device> devices_;
  readout::Request request_;
  int64_t simulate_out_of_memory_above_;
};

}  // namespace probekit::capture
