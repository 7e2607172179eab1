// What the device layer asks of a backend beyond the report of device_select.h: memory figures and cache
// clearing, behind one interface so that tests stand in for a CUDA or an Apple MPS machine on a CPU-only one
// (gpu_utils.cpp holds LibTorch's implementation). And the policies that use them, as pure functions: the memory
// a run may fill, out-of-memory batches retried in halves, and what to tell the user when MPS fails.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device/device_select.h"

namespace probekit::device {

/// A device's memory as its runtime reports it now (weights already loaded count as held).
struct MemoryReading {
  uint64_t free_bytes = 0;         // CUDA / ROCm: what the driver reports free
  uint64_t working_set_bytes = 0;  // MPS: Metal's recommendedMaxWorkingSetSize (LibTorch 2.5 and later; else 0)
  uint64_t allocated_bytes = 0;    // MPS: what this process's Metal driver holds (weights, tensors, cached blocks)
};

/// The backend operations of the device layer.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  /// The devices there are (device_select.h's input).
  virtual RuntimeReport report() const = 0;
  /// The memory of `device` now; all zero on the CPU.
  virtual MemoryReading memory(const DeviceChoice& device) const = 0;
  /// Returns the allocator's cached, unused blocks of `device` to the system (no-op on the CPU).
  virtual void empty_cache(const DeviceChoice& device) const = 0;
};

/// Memory a run may fill on a device, and where the figure comes from (for the log).
struct MemoryBudget {
  uint64_t bytes = 0;  // 0: unknown (the CPU, or MPS with a LibTorch older than 2.5)
  std::string source;
};

/// The memory a run may still fill beside what it holds: a GPU's free memory; on MPS, which shares the system's
/// memory, Metal's recommended working set less what the process holds. --max-gpu-memory (`max_gpu_memory`
/// bytes, 0 when not given) caps it at that figure less the weights; a cap the weights alone exceed is a
/// UsageError.
MemoryBudget memory_budget(Backend backend, const MemoryReading& reading, int64_t max_gpu_memory, int64_t weight_bytes);

/// State of one run's out-of-memory retries on the devices one batch runs on (several when the model's layers are
/// placed over devices: any of them may be the one that ran out).
struct OutOfMemoryRetry {
  const DeviceRuntime& runtime;
  std::vector<DeviceChoice> devices;  // not empty
  int64_t retries = 0;                // batches split so far
};

/// Runs `run` on `batch`; when it fails with an accelerator's out-of-memory error, clears every device's cache,
/// logs what to lower (once per run) and runs the two halves in turn, recursively down to single items, whose
/// failure is rethrown. `run` completes once for each sub-batch, in the batch's order.
void run_in_halves(const std::vector<int64_t>& batch, const std::function<void(const std::vector<int64_t>&)>& run,
                   OutOfMemoryRetry& retry);

/// The warning of the first split of a run: the batch size, and what to lower on that backend.
std::string out_of_memory_retry_warning(Backend backend, size_t batch_size);

/// True when the message is an accelerator's out-of-memory error (CUDA, HIP or MPS).
bool is_out_of_memory_message(const std::string& message);

/// What to do about a device's failure (an operator without an MPS kernel, a device out of memory), to follow its
/// message; empty for failures that are not the device's.
std::string failure_advice(const std::string& message);

/// Advice for a failure of LibTorch's MPS backend (an operator without an MPS kernel, MPS out of memory), to
/// follow its message; empty for other failures.
std::string mps_failure_advice(const std::string& message);

/// The log line of a run on MPS: whether operators without an MPS kernel run on the CPU, as LibTorch decides from
/// PYTORCH_ENABLE_MPS_FALLBACK (`value`, null when unset) when it loads.
std::string mps_fallback_note(const char* value);

}  // namespace probekit::device
