#include "device/torch/gpu_utils.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <thread>
#include <unistd.h>

// Only compilers that generate OpenMP code define _OPENMP: clang with GCC's runtime (-fopenmp=libgomp) does not.
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __linux__
#include <sched.h>
#endif

#ifdef PROBEKIT_WITH_CUDA
#include "device/torch/cuda/gpu_cuda.h"
#endif
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/detail/MPSHooksInterface.h>
#endif

namespace probekit::device {

#if TORCH_VERSION_MAJOR < 2
namespace {

// LibTorch 1.x does its bf16 CPU matrix products with oneDNN 2.x, whose AMX kernels die of SIGILL on Sapphire
// Rapids (oneDNN issue 1661): capped at AVX-512 with bf16, the products are correct. Set before main, so before
// any oneDNN call of any binary linking the device layer; a value the user set is kept.
const bool onednn_isa_capped = setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 0) == 0;

}  // namespace
#endif

int available_cores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
#ifdef __linux__
  // A container or taskset may allow fewer cores than the machine has.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
#else
  // macOS has no affinity masks: every core is available to the process.
#endif
  return std::max(1, cores);
}

RuntimeReport query_runtime() {
  RuntimeReport report;
  report.cpu_cores = available_cores();
  report.mps_available = at::hasMPS();
#ifdef PROBEKIT_WITH_ROCM
  report.rocm_build = true;
#endif
#ifdef PROBEKIT_WITH_CUDA
  if (at::hasCUDA()) report.gpus = cuda::query_devices();
#else
  // A GPU build without the CUDA runtime headers (ROCm): LibTorch still reports the count.
  if (at::hasCUDA()) {
    int count = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
    for (int i = 0; i < count; ++i) report.gpus.push_back(GpuInfo{"GPU " + std::to_string(i), 0, 0, 0, 0});
  }
#endif
  return report;
}

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat16: return at::kHalf;
  }
  return at::kFloat;
}

std::string precision_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return dtype_name(DType::kFloat32);
    case at::kBFloat16: return dtype_name(DType::kBFloat16);
    case at::kHalf: return dtype_name(DType::kFloat16);
    default: return c10::toString(type);
  }
}

at::Device to_device(const DeviceChoice& choice) {
  switch (choice.backend) {
    case Backend::kCpu: return at::Device(at::kCPU);
    case Backend::kMps: return at::Device(at::kMPS);
    case Backend::kCuda:
    case Backend::kRocm: return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
  }
  return at::Device(at::kCPU);
}

namespace {

class LibTorchRuntime : public DeviceRuntime {
 public:
  RuntimeReport report() const override { return query_runtime(); }

  MemoryReading memory(const DeviceChoice& device) const override {
    MemoryReading reading;
#ifdef PROBEKIT_WITH_CUDA
    if (device.backend == Backend::kCuda || device.backend == Backend::kRocm) reading.free_bytes = cuda::free_memory(device.index);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
    // The MPS allocator's figures, as torch.mps.recommended_max_memory() and driver_allocated_memory() give them.
    if (device.backend == Backend::kMps) {
      reading.working_set_bytes = at::detail::getMPSHooks().getRecommendedMaxMemory();
      reading.allocated_bytes = at::detail::getMPSHooks().getDriverAllocatedMemory();
    }
#endif
    (void)device;
    return reading;
  }

  void empty_cache(const DeviceChoice& device) const override { device::empty_cache(to_device(device)); }
};

}  // namespace

uint64_t memory_for_tensors(const at::Device& device) {
  if (device.is_cuda()) {
    DeviceChoice choice;
    choice.backend = Backend::kCuda;
    choice.index = std::max<int>(0, device.index());
    return libtorch_runtime().memory(choice).free_bytes;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
}

const DeviceRuntime& libtorch_runtime() {
  static const LibTorchRuntime runtime;
  return runtime;
}

ComputeTarget select_compute(const std::string& device_request, const std::string& dtype_request,
                             const DeviceRuntime& runtime) {
  ComputeTarget target;
  target.device_runtime = &runtime;
  target.runtime = runtime.report();
  target.choice = choose_device(device_request, target.runtime);
  target.dtype_choice = choose_dtype(dtype_request, target.choice, target.runtime);
  target.device = to_device(target.choice);
  target.dtype = to_scalar_type(target.dtype_choice.dtype);
  spdlog::info("{}; dtype {} ({})", describe(target.choice, target.runtime), dtype_name(target.dtype_choice.dtype),
               target.dtype_choice.reason);
  if (!target.dtype_choice.warning.empty()) spdlog::warn("{}", target.dtype_choice.warning);
  if (target.choice.backend == Backend::kMps) spdlog::info("{}", mps_fallback_note(std::getenv("PYTORCH_ENABLE_MPS_FALLBACK")));
  return target;
}

int configure_threads(int requested) {
  int threads = requested > 0 ? requested : available_cores();
  at::set_num_threads(threads);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  return threads;
}

void synchronize(const at::Device& device) {
#ifdef PROBEKIT_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index() < 0 ? 0 : device.index());
#endif
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_mps()) at::detail::getMPSHooks().deviceSynchronize();
#endif
  (void)device;
}

void empty_cache(const at::Device& device) {
#ifdef PROBEKIT_WITH_CUDA
  if (device.is_cuda()) cuda::empty_cache();
#endif
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_mps()) at::detail::getMPSHooks().emptyCache();
#endif
  (void)device;
}

WorkerStreams::WorkerStreams(const std::vector<at::Device>& devices) : guard_(devices.at(0)) {
#ifdef PROBEKIT_WITH_CUDA
  std::vector<int> indices;
  for (const at::Device& device : devices) {
    if (device.is_cuda()) indices.push_back(device.index());
  }
  if (!indices.empty()) streams_ = cuda::use_pool_streams(indices);
#endif
}

}  // namespace probekit::device
