// decode_fp8_rows: FP8 (e4m3fn) weight rows times their row scales, decoded into fp32, bf16 or fp16 in one pass.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// The float32 value of a float8_e4m3fn byte, exactly, from its bits: 4 exponent bits biased by 7 and 3 mantissa
// bits, rebiased into a float's; exponent 0 is subnormal (m * 2^-9); 0x7f and 0xff are NaN.
__device__ __forceinline__ float e4m3fn_value(uint32_t byte) {
  const uint32_t exponent = (byte >> 3) & 0xf, mantissa = byte & 0x7, sign = (byte & 0x80) << 24;
  if (exponent == 0xf && mantissa == 0x7) return __int_as_float(0x7fc00000);
  if (exponent == 0) return __uint_as_float(sign | __float_as_uint(static_cast<float>(mantissa) * 0.001953125f));
  return __uint_as_float(sign | ((exponent + 120) << 23) | (mantissa << 20));
}

// Sixteen bytes a thread: one 16-byte load, one scale (rows and blocks a multiple of 16 wide, so that a group
// never spans two rows or two blocks), each value times it rounded once into T, stored 16 bytes at a time.
template <typename T>
__global__ void decode_fp8_rows_kernel(const uint4* __restrict__ bytes, const float* __restrict__ row_scales,
                                       T* __restrict__ out, int64_t groups, int64_t in, int64_t scale_columns,
                                       int64_t block_in) {
  constexpr int kPerPack = 16 / sizeof(T);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t group = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; group < groups; group += stride) {
    const int64_t first = group * 16, row = first / in;
    const uint4 packed = bytes[group];
    const float scale = row_scales[row * scale_columns + (first - row * in) / block_in];
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    Pack<T> values[16 / kPerPack];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      values[j / kPerPack].v[j % kPerPack] = static_cast<T>(e4m3fn_value((words[j / 4] >> (8 * (j % 4))) & 0xff) * scale);
    }
    auto* target = reinterpret_cast<Pack<T>*>(out + first);
#pragma unroll
    for (int p = 0; p < 16 / kPerPack; ++p) target[p] = values[p];
  }
}

// The same a byte a thread, for rows of any width.
template <typename T>
__global__ void decode_fp8_bytes_kernel(const uint8_t* __restrict__ bytes, const float* __restrict__ row_scales,
                                        T* __restrict__ out, int64_t total, int64_t in, int64_t scale_columns,
                                        int64_t block_in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / in, column = i % in;
    out[i] = static_cast<T>(e4m3fn_value(bytes[i]) * row_scales[row * scale_columns + column / block_in]);
  }
}

}  // namespace

at::Tensor decode_fp8_rows(const at::Tensor& bytes_in, const at::Tensor& row_scales_in, int64_t block_in,
                           at::ScalarType dtype) {
  c10::cuda::CUDAGuard guard(bytes_in.device());
  at::Tensor bytes = bytes_in.contiguous(), row_scales = row_scales_in.contiguous();
  const int64_t in = bytes.size(1), total = bytes.numel();
  at::Tensor out = at::empty(bytes.sizes(), bytes.options().dtype(dtype));
  if (total == 0) return out;
  auto stream = at::cuda::getCurrentCUDAStream();
  const bool by_groups = in % 16 == 0 && block_in % 16 == 0 && reinterpret_cast<uintptr_t>(bytes.data_ptr()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
  dispatch_float_type(dtype, [&](auto type) {
    using T = decltype(type);
    if (by_groups) {
      decode_fp8_rows_kernel<T><<<blocks_for(total / 16), kThreads, 0, stream>>>(
          reinterpret_cast<const uint4*>(bytes.data_ptr<uint8_t>()), row_scales.data_ptr<float>(), out.data_ptr<T>(),
          total / 16, in, row_scales.size(1), block_in);
    } else {
      decode_fp8_bytes_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
          bytes.data_ptr<uint8_t>(), row_scales.data_ptr<float>(), out.data_ptr<T>(), total, in, row_scales.size(1),
          block_in);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace probekit::model::fused
