#include "device/torch/transfers.h"

#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/api/include/torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/files.h"

namespace probekit::device {

at::Tensor to_device(const at::Tensor& host, at::Device device) {
  if (!device.is_cuda() || !host.device().is_cpu()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

at::Tensor PinnedPool::make(int64_t bytes) {
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(at::hasCUDA()));
}

void PinnedPool::reserve(int64_t bytes, int count) {
  std::vector<at::Tensor> made;
  for (int i = 0; i < count; ++i) made.push_back(make(bytes));
  std::lock_guard<std::mutex> lock(buffers_->mutex);
  buffers_->made += made.size();
  buffers_->free.insert(buffers_->free.end(), made.begin(), made.end());
}

at::Tensor PinnedPool::take(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t size : sizes) bytes *= size;
  at::Tensor buffer;
  {
    std::lock_guard<std::mutex> lock(buffers_->mutex);
    auto& free = buffers_->free;
    auto fits = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->numel() >= bytes && (fits == free.end() || it->numel() < fits->numel())) fits = it;
    }
    if (fits != free.end()) {
      buffer = *fits;
      free.erase(fits);
    } else {
      ++buffers_->made;
    }
  }
  if (!buffer.defined()) buffer = make(std::max<int64_t>(bytes, 1));
  // The tensor views the buffer; its deleter, run when the tensor and its views are gone, hands it back.
  return at::from_blob(
      buffer.data_ptr(), sizes,
      [buffers = buffers_, buffer](void*) {
        std::lock_guard<std::mutex> lock(buffers->mutex);
        buffers->free.push_back(buffer);
      },
      at::TensorOptions().dtype(dtype));
}

size_t PinnedPool::buffers() const {
  std::lock_guard<std::mutex> lock(buffers_->mutex);
  return buffers_->made;
}

HostCopy::HostCopy(const at::Tensor& values, PinnedPool* pool) {
  if (!values.is_cuda()) {
    host_ = values.to(at::kCPU).contiguous();
    return;
  }
  host_ = pool != nullptr ? pool->take(values.sizes(), values.scalar_type())
                          : at::empty(values.sizes(), values.options().device(at::kCPU).pinned_memory(true));
  host_.copy_(values, /*non_blocking=*/true);
  copied_.emplace(values.device().type());
  copied_->record(c10::impl::VirtualGuardImpl(values.device().type()).getStream(values.device()));
}

namespace {

void synchronize_event(const c10::Event& event) {
#if TORCH_VERSION_MAJOR >= 2
  event.synchronize();
#else  // LibTorch 1.x has no Event::synchronize; the event's own stream may not be this thread's current one
  while (!event.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
#endif
}

}  // namespace

HostCopy::~HostCopy() {
  if (copied_) synchronize_event(*copied_);
}

const at::Tensor& HostCopy::wait() const {
  if (copied_) synchronize_event(*copied_);
  return host_;
}

StagedUpload::StagedUpload(int64_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}

StagedUpload::~StagedUpload() {
  for (Buffer& buffer : buffers_) wait_until_free(buffer);
  for (const auto& [path, fd] : files_) ::close(fd);
}

void StagedUpload::wait_until_free(Buffer& buffer) {
  if (!buffer.taken) return;
  synchronize_event(*buffer.taken);
  buffer.taken.reset();
}

at::Tensor StagedUpload::upload_bytes(const at::Tensor& like, at::Device device,
                                      const std::function<void(char*, int64_t, int64_t)>& fill) {
  std::lock_guard<std::mutex> lock(mutex_);
  at::Tensor out = at::empty(like.sizes(), like.options().device(device));
  const auto total = static_cast<int64_t>(like.nbytes());
  at::Tensor out_bytes = out.view({-1}).view(at::kByte);
  auto stream = c10::impl::VirtualGuardImpl(device.type()).getStream(device);
  for (int64_t offset = 0; offset < total; offset += buffer_bytes_) {
    Buffer& buffer = buffers_[next_++ % 2];
    wait_until_free(buffer);
    if (!buffer.pinned.defined()) {
      buffer.pinned = at::empty({buffer_bytes_}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    }
    const int64_t count = std::min(buffer_bytes_, total - offset);
    char* staging = static_cast<char*>(buffer.pinned.data_ptr());
    // Filled in parallel, which also brings a cold file's pages in from disk with several requests in flight.
    at::parallel_for(0, count, int64_t{1} << 20,
                     [&](int64_t begin, int64_t end) { fill(staging + begin, offset + begin, end - begin); });
    out_bytes.narrow(0, offset, count).copy_(buffer.pinned.narrow(0, 0, count), /*non_blocking=*/true);
    buffer.taken.emplace(device.type());
    buffer.taken->record(stream);
  }
  return out;
}

at::Tensor StagedUpload::upload(const at::Tensor& host, at::Device device) {
  const char* source = static_cast<const char*>(host.data_ptr());
  return upload_bytes(host, device, [source](char* staging, int64_t offset, int64_t count) {
    std::memcpy(staging, source + offset, static_cast<size_t>(count));
  });
}

at::Tensor StagedUpload::upload_from_file(const std::string& path, uint64_t offset, const at::Tensor& like,
                                          at::Device device) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto open = files_.find(path);
    if (open == files_.end()) open = files_.emplace(path, open_input_file(path)).first;
    fd = open->second;
  }
  return upload_bytes(like, device, [&path, fd, offset](char* staging, int64_t at, int64_t count) {
    for (int64_t done = 0; done < count;) {
      const auto position = static_cast<off_t>(offset + static_cast<uint64_t>(at + done));
      const ssize_t got = ::pread(fd, staging + done, static_cast<size_t>(count - done), position);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fail("cannot read {} at byte {}: {}", path, position, got == 0 ? "the file ends there" : std::strerror(errno));
      }
      done += got;
    }
  });
}

}  // namespace probekit::device
