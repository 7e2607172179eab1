// decode_mxfp4: MXFP4 weights (e2m1 codes, an e8m0 scale per 32 values) decoded into fp32, bf16 or fp16 in one
// pass.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// The value of an FP4 e2m1 code: 1 sign bit, 2 exponent bits biased by 1, 1 mantissa bit.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 7];
  return (code & 8) != 0 ? -magnitude : magnitude;
}

// One thread a group of 32 values: its 16 bytes (two e2m1 codes a byte, the low nibble first) and its e8m0 scale
// 2^(s - 127), each value times it rounded once into T (exact in bf16 and fp32: two significant bits times a power
// of two), stored 16 bytes at a time.
template <typename T>
__global__ void decode_mxfp4_kernel(const uint4* __restrict__ blocks, const uint8_t* __restrict__ scales,
                                    T* __restrict__ out, int64_t groups) {
  constexpr int kPerPack = 16 / sizeof(T);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t group = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; group < groups; group += stride) {
    const uint4 packed = blocks[group];
    const uint32_t exponent = scales[group];
    // 2^-127 is a subnormal float (0x00400000), 255 is NaN (refused on load), the others are normal floats whose
    // exponent field is the byte itself.
    const float scale = exponent == 0     ? __uint_as_float(0x00400000u)
                        : exponent == 255 ? __uint_as_float(0x7fc00000u)
                                          : __uint_as_float(exponent << 23);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    Pack<T> values[32 / kPerPack];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const uint32_t byte = (words[j / 8] >> (8 * ((j % 8) / 2))) & 0xff;
      values[j / kPerPack].v[j % kPerPack] = static_cast<T>(e2m1_value(j % 2 == 0 ? byte & 0xf : byte >> 4) * scale);
    }
    auto* target = reinterpret_cast<Pack<T>*>(out + group * 32);
#pragma unroll
    for (int p = 0; p < 32 / kPerPack; ++p) target[p] = values[p];
  }
}

}  // namespace

bool decode_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::Tensor& out) {
  const int64_t groups = scales.numel();
  if (!blocks.is_contiguous() || !scales.is_contiguous() || !out.is_contiguous() || blocks.numel() != groups * 16 ||
      out.numel() != groups * 32 || reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 != 0) {
    return false;
  }
  if (groups == 0) return true;
  c10::cuda::CUDAGuard guard(blocks.device());
  dispatch_float_type(out.scalar_type(), [&](auto type) {
    using T = decltype(type);
    decode_mxfp4_kernel<T><<<blocks_for(groups), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint4*>(blocks.data_ptr<uint8_t>()), scales.data_ptr<uint8_t>(), out.data_ptr<T>(), groups);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace probekit::model::fused
