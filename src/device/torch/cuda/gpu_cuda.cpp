#include "device/torch/cuda/gpu_cuda.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/error.h"

namespace probekit::device::cuda {

std::vector<GpuInfo> query_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
    GpuInfo gpu;
    gpu.name = props.name;
    gpu.total_memory_bytes = props.totalGlobalMem;
    gpu.free_memory_bytes = free_memory(i);
    gpu.capability_major = props.major;
    gpu.capability_minor = props.minor;
    gpus.push_back(gpu);
  }
  return gpus;
}

int capability_major(int index) {
  if (index < 0 && cudaGetDevice(&index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major;
}

uint64_t free_memory(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free_bytes;
}

void synchronize(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) fail("CUDA error while synchronizing device {}: {}", index, cudaGetErrorString(status));
}

void empty_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

std::shared_ptr<void> use_pool_streams(const std::vector<int>& indices) {
  std::vector<c10::cuda::CUDAStream> streams;
  for (int index : indices) streams.push_back(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(index)));
  return std::make_shared<c10::cuda::CUDAMultiStreamGuard>(streams);
}

}  // namespace probekit::device::cuda
