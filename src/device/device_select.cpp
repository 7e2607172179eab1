#include "device/device_select.h"

#include <fmt/format.h>

#include <cctype>

#include "common/error.h"
#include "common/units.h"

namespace probekit::device {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits "cuda:1" into ("cuda", 1); a missing index is -1.
std::pair<std::string, int> split_index(const std::string& request) {
  auto colon = request.find(':');
  if (colon == std::string::npos) return {request, -1};
  std::string digits = request.substr(colon + 1);
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
    fail_usage("--device {}: expected a device index after ':', as in cuda:0", request);
  }
  return {request.substr(0, colon), std::stoi(digits)};
}

std::string gpu_prefix(const RuntimeReport& runtime) { return runtime.rocm_build ? "rocm" : "cuda"; }

DeviceChoice pick_gpu(const std::string& request, int index, Backend wanted, const RuntimeReport& runtime) {
  if (runtime.gpus.empty()) {
    fail_usage("--device {}: no {} device is available (this LibTorch build sees none); available: {}", request,
               wanted == Backend::kRocm ? "ROCm" : "CUDA", list_available(runtime));
  }
  if (wanted == Backend::kRocm && !runtime.rocm_build) {
    fail_usage("--device {}: this LibTorch build drives CUDA GPUs, not ROCm; available: {}", request,
               list_available(runtime));
  }
  int chosen = index < 0 ? 0 : index;
  if (chosen >= static_cast<int>(runtime.gpus.size())) {
    fail_usage("--device {}: there is no GPU {}; available: {}", request, chosen, list_available(runtime));
  }
  DeviceChoice choice;
  choice.backend = runtime.rocm_build ? Backend::kRocm : Backend::kCuda;
  choice.index = chosen;
  choice.reason = "requested";
  return choice;
}

}  // namespace

bool supports_bf16(const GpuInfo& gpu, bool rocm_build) { return rocm_build || gpu.capability_major >= 8; }

std::string backend_name(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    case Backend::kRocm: return "rocm";
    case Backend::kMps: return "mps";
  }
  return "?";
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  std::string n = lower(name);
  if (n == "fp32" || n == "float32" || n == "float") return DType::kFloat32;
  if (n == "bf16" || n == "bfloat16") return DType::kBFloat16;
  if (n == "fp16" || n == "float16" || n == "half") return DType::kFloat16;
  fail_usage("--dtype {}: expected auto, fp32, bf16 or fp16", name);
}

std::string list_available(const RuntimeReport& runtime) {
  std::string out = "cpu";
  for (size_t i = 0; i < runtime.gpus.size(); ++i) {
    const GpuInfo& gpu = runtime.gpus[i];
    out += fmt::format(", {}:{} ({}, {:.1f} GiB)", gpu_prefix(runtime), i, gpu.name, gib(gpu.total_memory_bytes));
  }
  if (runtime.mps_available) out += ", mps";
  return out;
}

DeviceChoice choose_device(const std::string& raw_request, const RuntimeReport& runtime) {
  std::string request = lower(raw_request);
  auto [kind, index] = split_index(request);
  if (kind == "auto") {
    if (index >= 0) fail_usage("--device {}: auto takes no index", raw_request);
    DeviceChoice choice;
    if (!runtime.gpus.empty()) {
      choice.backend = runtime.rocm_build ? Backend::kRocm : Backend::kCuda;
      choice.reason = runtime.rocm_build ? "auto: ROCm GPU found (exposed by LibTorch as CUDA)" : "auto: CUDA GPU found";
    } else if (runtime.mps_available) {
      choice.backend = Backend::kMps;
      choice.reason = "auto: no CUDA or ROCm GPU, Apple MPS available";
    } else {
      choice.backend = Backend::kCpu;
      choice.reason = "auto: no GPU available";
    }
    return choice;
  }
  if (kind == "cpu") {
    if (index > 0) fail_usage("--device {}: the CPU has no index", raw_request);
    return DeviceChoice{Backend::kCpu, 0, "requested"};
  }
  // A ROCm build answers to "cuda" as LibTorch itself does.
  if (kind == "cuda" || kind == "gpu") return pick_gpu(raw_request, index, Backend::kCuda, runtime);
  if (kind == "rocm" || kind == "hip") return pick_gpu(raw_request, index, Backend::kRocm, runtime);
  if (kind == "mps") {
    if (!runtime.mps_available) {
      fail_usage("--device {}: Apple MPS is not available here; available: {}", raw_request, list_available(runtime));
    }
    return DeviceChoice{Backend::kMps, 0, "requested"};
  }
  fail_usage("--device {}: unknown device; expected auto, cpu, cuda, cuda:N, rocm or mps (available: {})", raw_request,
             list_available(runtime));
}

DTypeChoice choose_dtype(const std::string& request, const DeviceChoice& device, const RuntimeReport& runtime) {
  bool is_auto = lower(request) == "auto";
  DTypeChoice choice;
  if (device.backend == Backend::kMps) {
    choice.dtype = DType::kFloat32;
    choice.reason = "MPS computes in fp32";
    if (!is_auto && parse_dtype(request) != DType::kFloat32) {
      choice.warning = fmt::format("--dtype {} is not supported on MPS (bf16 is unavailable there); using fp32", request);
    }
    return choice;
  }
  if (!is_auto) {
    choice.dtype = parse_dtype(request);
    choice.reason = "requested";
    if (device.backend == Backend::kCpu && choice.dtype == DType::kFloat16) {
      fail_usage("--dtype {}: the CPU cannot run fp16 matrix products (LibTorch has no such kernels there); use fp32 "
                 "or bf16",
                 request);
    }
    bool gpu = device.backend == Backend::kCuda || device.backend == Backend::kRocm;
    if (gpu && choice.dtype == DType::kBFloat16 && !supports_bf16(runtime.gpus.at(device.index), runtime.rocm_build)) {
      choice.warning = "this GPU has no native bf16 arithmetic (compute capability below 8.0): expect it to be slow";
    }
    return choice;
  }
  if (device.backend == Backend::kCpu) {
    choice.dtype = DType::kFloat32;
    choice.reason = "auto: fp32 on CPU";
    return choice;
  }
  const GpuInfo& gpu = runtime.gpus.at(device.index);
  if (supports_bf16(gpu, runtime.rocm_build)) {
    choice.dtype = DType::kBFloat16;
    choice.reason = "auto: the GPU supports bf16";
  } else {
    choice.dtype = DType::kFloat16;
    choice.reason = fmt::format("auto: compute capability {}.{} has no bf16, using fp16", gpu.capability_major,
                                gpu.capability_minor);
  }
  return choice;
}

std::string describe(const DeviceChoice& device, const RuntimeReport& runtime) {
  switch (device.backend) {
    case Backend::kCpu:
      return fmt::format("device cpu ({} cores) - {}", runtime.cpu_cores, device.reason);
    case Backend::kMps:
      return fmt::format("device mps (Apple GPU) - {}", device.reason);
    case Backend::kCuda:
    case Backend::kRocm: {
      const GpuInfo& gpu = runtime.gpus.at(device.index);
      std::string capability = gpu.capability_major > 0
                                   ? fmt::format(", compute capability {}.{}", gpu.capability_major, gpu.capability_minor)
                                   : "";
      return fmt::format("device {}:{} ({}, {:.1f} GiB total, {:.1f} GiB free{}) - {}", backend_name(device.backend),
                         device.index, gpu.name, gib(gpu.total_memory_bytes), gib(gpu.free_memory_bytes), capability,
                         device.reason);
    }
  }
  return "?";
}

}  // namespace probekit::device
