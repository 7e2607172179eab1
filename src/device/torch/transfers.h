// Copies between the host and an accelerator that do not stop the host: inputs go up from pinned memory, rows
// come down into pinned memory behind the kernels that make them. The host then queues the next batch while the
// device still computes this one, and the device never waits for the host between batches.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <optional>
#include <vector>

namespace probekit::device {

/// `host` on `device`; from the CPU to a CUDA device through pinned memory, queued on the current stream
/// without waiting for it (the pinned buffer stays reserved until the copy is done).
at::Tensor to_device(const at::Tensor& host, at::Device device);

/// Pinned host buffers reused for values coming down from a GPU. LibTorch's host allocator makes a new buffer
/// for each new size class while the others are in flight, and cudaHostAlloc waits for the device to finish all
/// it was given: in a capture of 18 batches it made 17 and the GPU ran dry at each (up to 9 ms: measured).
/// Thread-safe. Without a CUDA device the buffers are ordinary host memory.
class PinnedPool {
 public:
  /// Makes `count` buffers of `bytes` ready (before a timed loop).
  void reserve(int64_t bytes, int count);
  /// An uninitialized host tensor of `sizes` and `dtype` in one of the pool's buffers (the smallest free one that
  /// fits, else a new one), which goes back to the pool when the tensor and its views are gone.
  at::Tensor take(at::IntArrayRef sizes, at::ScalarType dtype);
  /// Buffers made so far.
  size_t buffers() const;

 private:
  struct Buffers {
    std::mutex mutex;
    std::vector<at::Tensor> free;
    size_t made = 0;
  };
  static at::Tensor make(int64_t bytes);
  std::shared_ptr<Buffers> buffers_ = std::make_shared<Buffers>();
};

/// A tensor on its way to the host.
class HostCopy {
 public:
  /// Queues the copy of `values` to the host on the current stream (a CPU tensor is used as it is), into a
  /// buffer of `pool` when given.
  explicit HostCopy(const at::Tensor& values, PinnedPool* pool = nullptr);
  /// Waits for the copy: a pool's buffer must not go back while the device still writes it.
  ~HostCopy();
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  /// Waits for the copy; the values, contiguous on the host. Several threads may wait at once.
  const at::Tensor& wait() const;

 private:
  at::Tensor host_;
  std::optional<c10::Event> copied_;
};

/// Copies large host tensors (a checkpoint's memory map) to CUDA devices through two pinned buffers: the host
/// fills one with a parallel copy while the device takes the other, several times the rate of a copy from
/// pageable memory. Holds its pinned buffers (and the files it read) until destroyed; one at a time per object.
class StagedUpload {
 public:
  explicit StagedUpload(int64_t buffer_bytes = int64_t{64} << 20);
  ~StagedUpload();
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  /// A copy of `host` (contiguous, on the CPU) on the CUDA device `device`, same dtype and shape.
  at::Tensor upload(const at::Tensor& host, at::Device device);
  /// The same for `like`'s bytes read from the file `path` at `offset` (where `like` is a view of the file's memory
  /// map): read with pread, the map's pages are never faulted in, nor unmapped again at the end (0.2 s for a
  /// cold 7.8 GB checkpoint). A read that fails or ends early is an error naming the file and offset.
  at::Tensor upload_from_file(const std::string& path, uint64_t offset, const at::Tensor& like, at::Device device);

 private:
  struct Buffer {
    at::Tensor pinned;                // [buffer_bytes] uint8
    std::optional<c10::Event> taken;  // recorded when the device has queued its copy out of the buffer
  };
  void wait_until_free(Buffer& buffer);
  /// A tensor like `like` on `device` whose bytes [offset, offset + count) `fill(staging, offset, count)` writes
  /// into pinned staging memory, a buffer at a time.
  at::Tensor upload_bytes(const at::Tensor& like, at::Device device,
                          const std::function<void(char*, int64_t, int64_t)>& fill);

  int64_t buffer_bytes_;
  Buffer buffers_[2];
  size_t next_ = 0;
  std::map<std::string, int> files_;  // descriptors of the files read, by path
  std::mutex mutex_;
};

}  // namespace probekit::device
