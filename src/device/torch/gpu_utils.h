// The device layer every tool uses: asks LibTorch what hardware there is, applies the policy of
// device_select.h, and hides per-backend synchronisation and cache clearing behind one interface.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <memory>
#include <string>
#include <vector>

#include "device/device_select.h"
#include "device/runtime.h"

namespace probekit::device {

/// LibTorch's backends on this machine: CUDA or ROCm, MPS, the CPU.
const DeviceRuntime& libtorch_runtime();

/// The resolved place and precision of all tensor work in a run.
struct ComputeTarget {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  DeviceChoice choice;
  DTypeChoice dtype_choice;
  RuntimeReport runtime;
  const DeviceRuntime* device_runtime = &libtorch_runtime();  // memory queries and cache clearing

  bool is_gpu() const { return device.is_cuda(); }
  /// The device's memory now (see MemoryReading).
  MemoryReading memory() const { return device_runtime->memory(choice); }
};

/// Queries LibTorch for GPUs (name, memory, capability), MPS and CPU cores.
RuntimeReport query_runtime();

/// The LibTorch device of a choice: cpu, mps, or cuda:N (ROCm GPUs too, as LibTorch exposes them).
at::Device to_device(const DeviceChoice& choice);

/// Resolves --device and --dtype on `runtime`'s devices, logs one line saying what was picked and why, warns on
/// overrides.
ComputeTarget select_compute(const std::string& device_request, const std::string& dtype_request,
                             const DeviceRuntime& runtime = libtorch_runtime());

/// Sets LibTorch's and OpenMP's thread counts: `requested`, or one per core when 0. Returns the count.
int configure_threads(int requested);

/// Waits for queued work on the device to finish (no-op on CPU).
void synchronize(const at::Device& device);

/// The memory new tensors on `device` may take: a GPU's free memory, the machine's physical memory on the CPU and on
/// MPS (which shares it); 0 when unknown.
uint64_t memory_for_tensors(const at::Device& device);

/// Returns cached, unused device memory to the driver (no-op on CPU).
void empty_cache(const at::Device& device);

at::ScalarType to_scalar_type(DType dtype);

/// A compute precision's name as --dtype spells it (fp32, bf16, fp16); other types as torch names them.
std::string precision_name(at::ScalarType type);

/// For one worker thread of a pipeline, while it lives: makes `devices.front()` current and, on CUDA, gives
/// the thread a stream of its own on each of `devices` (a split model's stages), so that two workers' batches
/// overlap: one on the first stage while the other runs on the second.
class WorkerStreams {
 public:
  explicit WorkerStreams(const std::vector<at::Device>& devices);
  WorkerStreams(const WorkerStreams&) = delete;
  WorkerStreams& operator=(const WorkerStreams&) = delete;

 private:
  c10::DeviceGuard guard_;
  std::shared_ptr<void> streams_;
};

/// Cores available to this process (respects CPU affinity, as in containers).
int available_cores();

}  // namespace probekit::device
