// Copies between the host and an accelerator that do not stop the host: inputs go up from pinned memory, rows
// come down into pinned memory behind the kernels that make them. The host then queues the next batch while the
// device still computes this one, and the device never waits for the host between batches.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <optional>

namespace probekit::device {

/// `host` on `device`; from the CPU to a CUDA device through pinned memory, queued on the current stream
/// without waiting for it (the pinned buffer stays reserved until the copy is done).
at::Tensor to_device(const at::Tensor& host, at::Device device);

/// A tensor on its way to the host.
class HostCopy {
 public:
  /// Queues the copy of `values` to the host on the current stream (a CPU tensor is used as it is).
  explicit HostCopy(const at::Tensor& values);
  /// Waits for the copy; the values, contiguous on the host.
  const at::Tensor& wait();

 private:
  at::Tensor host_;
  std::optional<c10::Event> copied_;
};

}  // namespace probekit::device
