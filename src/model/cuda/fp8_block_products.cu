// Fine-grained FP8 products on the tensor cores (model/fused_ops.h): the activations quantized here, the product
// itself cuBLASLt's block-scaled FP8 matrix multiply through at::_scaled_mm.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_api.h>
#include <cuda_fp8.h>
#include <fmt/ranges.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstdint>

#include "common/error.h"
#include "device/torch/cuda/gpu_cuda.h"
#include "model/fused_ops.h"
#include "model/quantization.h"

namespace probekit::model::fused {

namespace {

constexpr int64_t kGroup = 128;   // inputs sharing one activation scale, and the weight blocks' side
constexpr float kE4m3Max = 448.0f;
constexpr int kWarpsPerBlock = 8;

// One warp a group of 128 inputs of one row, four values a lane: the group's largest magnitude over 448 is its
// scale, and each value divided by it is rounded to the nearest e4m3 (saturating; the largest lands on 448).
// `scales` is column-major [rows, groups_per_row] with columns `scale_stride` apart, as cuBLASLt reads activation
// block scales.
template <typename T>
__global__ void quantize_fp8_groups_kernel(const T* __restrict__ x, uint32_t* __restrict__ codes,
                                           float* __restrict__ scales, int64_t rows, int64_t scale_stride,
                                           int64_t groups_per_row) {
  const int64_t group = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (group >= rows * groups_per_row) return;
  const int lane = threadIdx.x % 32;
  const int64_t first = group * kGroup + lane * 4;
  float v[4];
  float largest = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = static_cast<float>(x[first + j]);
    largest = fmaxf(largest, fabsf(v[j]));
  }
  for (int offset = 16; offset > 0; offset /= 2) largest = fmaxf(largest, __shfl_xor_sync(0xffffffff, largest, offset));
  // An all-zero group (a padded row) keeps scale 1 rather than dividing zero by zero.
  const float scale = largest > 0.0f ? largest / kE4m3Max : 1.0f;
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t code = __nv_cvt_float_to_fp8(v[j] / scale, __NV_SATFINITE, __NV_E4M3);
    packed |= code << (8 * j);
  }
  codes[first / 4] = packed;
  if (lane == 0) {
    const int64_t row = group / groups_per_row;
    scales[(group - row * groups_per_row) * scale_stride + row] = scale;
  }
}

// cuBLASLt refuses block-scaled products of row counts not a multiple of 4 (CUBLAS_STATUS_NOT_SUPPORTED): the
// products run on rows padded to one, the padding rows zero with scale 1.
constexpr int64_t kRowMultiple = 4;

// quantize_fp8_groups on x [rows, in] into `padded_rows` >= rows rows.
std::pair<at::Tensor, at::Tensor> quantize_padded(const at::Tensor& x, int64_t padded_rows) {
  const int64_t rows = x.size(0), in = x.size(1);
  if (in % kGroup != 0) fail("FP8 activation groups need a multiple of {} inputs, got {}", kGroup, in);
  at::Tensor codes = at::empty({padded_rows, in}, x.options().dtype(at::kByte));
  at::Tensor scales_by_group = at::empty({in / kGroup, padded_rows}, x.options().dtype(at::kFloat));
  codes.narrow(0, rows, padded_rows - rows).zero_();
  scales_by_group.narrow(1, rows, padded_rows - rows).fill_(1.0);
  const int64_t groups = rows * (in / kGroup);
  if (groups == 0) return {codes, scales_by_group.t()};
  const auto blocks = static_cast<unsigned>((groups + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto launch = [&](auto* data) {
    quantize_fp8_groups_kernel<<<blocks, kWarpsPerBlock * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        data, reinterpret_cast<uint32_t*>(codes.data_ptr<uint8_t>()), scales_by_group.data_ptr<float>(), rows,
        padded_rows, in / kGroup);
  };
  if (x.scalar_type() == at::kBFloat16) {
    launch(x.data_ptr<at::BFloat16>());
  } else if (x.scalar_type() == at::kHalf) {
    launch(x.data_ptr<at::Half>());
  } else {
    fail("FP8 products take bf16 or fp16 activations, got {}", c10::toString(x.scalar_type()));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {codes, scales_by_group.t()};
}

}  // namespace

bool fp8_block_products_available(const at::Device& device) {
  // cuBLASLt scales FP8 products by 1x128 and 128x128 blocks from 12.9 on, on Hopper only (compute capability 9.x);
  // LibTorch's at::_scaled_mm passes such scales from 2.9 on.
#if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)) && CUBLAS_VERSION >= 120900
  if (!device.is_cuda()) return false;
  return device::cuda::capability_major(device.index()) == 9;
#else
  (void)device;
  return false;
#endif
}

std::pair<at::Tensor, at::Tensor> quantize_fp8_groups(const at::Tensor& x) {
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t in = x.size(-1), rows = in == 0 ? 0 : x.numel() / in;
  return quantize_padded(x.reshape({rows, in}).contiguous(), rows);
}

at::Tensor fp8_block_linear(const at::Tensor& x, const at::Tensor& bytes, const at::Tensor& block_scales) {
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t out = bytes.size(0), in = bytes.size(1);
  const bool scales_fit =
      block_scales.dim() == 2 && block_scales.size(0) == out / kGroup && block_scales.size(1) == in / kGroup;
  if (!fp8_block_products_run_on(x.device(), x.scalar_type()) || !fp8_block_products_take(out, in) || !scales_fit ||
      x.size(-1) != in) {
    fail("FP8 block product on {} in {}: a weight [{}, {}] with block scales [{}] does not take inputs [{}]",
         x.device().str(), c10::toString(x.scalar_type()), out, in, fmt::join(block_scales.sizes(), ", "),
         fmt::join(x.sizes(), ", "));
  }
  const int64_t rows = x.numel() / in;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  if (rows == 0) return at::zeros(shape, x.options());
  auto [codes, scales] =
      quantize_padded(x.reshape({rows, in}).contiguous(), (rows + kRowMultiple - 1) / kRowMultiple * kRowMultiple);
  // cuBLASLt wants the weight column-major [in, out] with its scales [in / 128, out / 128] outer-major: the
  // transposed views of the stored [out, in] and [out / 128, in / 128].
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  at::Tensor product = at::_scaled_mm(codes.view(at::kFloat8_e4m3fn), bytes.view(at::kFloat8_e4m3fn).t(), scales,
                                      block_scales.t(), std::nullopt, std::nullopt, x.scalar_type(), false);
  return product.narrow(0, 0, rows).view(shape);
#else
  fail("FP8 block products need LibTorch 2.9 or later");
#endif
}

}  // namespace probekit::model::fused
