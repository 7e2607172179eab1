#include "device/transfers.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/api/include/torch/version.h>

namespace probekit::device {

at::Tensor to_device(const at::Tensor& host, at::Device device) {
  if (!device.is_cuda() || !host.device().is_cpu()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

HostCopy::HostCopy(const at::Tensor& values) {
  if (!values.is_cuda()) {
    host_ = values.to(at::kCPU).contiguous();
    return;
  }
  host_ = at::empty(values.sizes(), values.options().device(at::kCPU).pinned_memory(true));
  host_.copy_(values, /*non_blocking=*/true);
  copied_.emplace(values.device().type());
  copied_->record(c10::impl::VirtualGuardImpl(values.device().type()).getStream(values.device()));
}

const at::Tensor& HostCopy::wait() {
  if (copied_) {
#if TORCH_VERSION_MAJOR >= 2
    copied_->synchronize();
#else
    c10::impl::VirtualGuardImpl(copied_->device_type()).getStream(copied_->device()).synchronize();
#endif
    copied_.reset();
  }
  return host_;
}

}  // namespace probekit::device
