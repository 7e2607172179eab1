// A stand-in for LibTorch's backends (device/runtime.h's seam), to play machines this one is not: an Apple
// M-series Mac with MPS, or a CUDA one. The test sets what it reports; every cache clearing is recorded.
#pragma once

#include <vector>

#include "device/runtime.h"

namespace probekit::testing {

class FakeDeviceRuntime : public device::DeviceRuntime {
 public:
  device::RuntimeReport machine;
  device::MemoryReading reading;
  mutable std::vector<device::Backend> cleared;
  mutable std::vector<int> cleared_indices;  // the device index of each clearing

  device::RuntimeReport report() const override { return machine; }
  device::MemoryReading memory(const device::DeviceChoice&) const override { return reading; }
  void empty_cache(const device::DeviceChoice& device) const override {
    cleared.push_back(device.backend);
    cleared_indices.push_back(device.index);
  }
};

/// A Mac as LibTorch 2.5+ reports it: MPS and 8 cores, no CUDA; Metal recommends a 16 GiB working set of which
/// the process holds 3 GiB.
inline FakeDeviceRuntime apple_silicon_mac() {
  FakeDeviceRuntime mac;
  mac.machine.mps_available = true;
  mac.machine.cpu_cores = 8;
  mac.reading.working_set_bytes = 16ull << 30;
  mac.reading.allocated_bytes = 3ull << 30;
  return mac;
}

// LibTorch's messages, as its MPS backend words them.
inline const char* const kMpsOutOfMemory =
    "MPS backend out of memory (MPS allocated: 18.50 GiB, other allocations: 448.00 KiB, max allowed: 18.72 GiB). "
    "Tried to allocate 512.00 MiB on shared pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit "
    "for memory allocations (may cause system failure).";
inline const char* const kMpsMissingKernel =
    "The operator 'aten::_linalg_solve_ex.result' is not currently implemented for the MPS device. If you want this "
    "op to be added in priority during the prototype phase of this feature, please comment on "
    "https://github.com/pytorch/pytorch/issues/77764. As a temporary fix, you can set the environment variable "
    "`PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this op. WARNING: this will be slower than "
    "running natively on MPS.";

}  // namespace probekit::testing
