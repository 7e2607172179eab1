// The device layer every tool uses: asks LibTorch what hardware there is, applies the policy of
// device_select.h, and hides per-backend synchronisation and cache clearing behind one interface.
#pragma once

#include <ATen/ATen.h>

#include <string>

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

/// Returns cached, unused device memory to the driver (no-op on CPU).
void empty_cache(const at::Device& device);

at::ScalarType to_scalar_type(DType dtype);

/// Cores available to this process (respects CPU affinity, as in containers).
int available_cores();

}  // namespace probekit::device
