// Helpers the fused kernels of model/fused_ops.h share (one .cu file per op in this folder). Each kernel works on
// rows (a token's hidden vector, or one attention head of one token), accumulating in fp32.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>

namespace probekit::model::fused {

// Internal linkage, as ggml-cuda's common.cuh makes its helpers static: each op's .cu compiles its own copy,
// and no device code is linked across files.
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

template <typename T>
__device__ __forceinline__ void store(T* p, int64_t i, float v) {
  p[i] = static_cast<T>(v);
}

// Sums of kCount values over the block, each reduced in the same order as block_sum's one (the same bits); every
// thread gets the results. Reducing several at once waits on the block's barriers once for all of them.
template <int kCount>
__device__ void block_sums(float (&values)[kCount]) {
  __shared__ float partial[kCount][32];
  __shared__ float total[kCount];
  __syncthreads();  // every thread has read the previous call's totals before they are overwritten
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int c = 0; c < kCount; ++c) {
    for (int offset = 16; offset > 0; offset /= 2) values[c] += __shfl_down_sync(0xffffffff, values[c], offset);
    if (lane == 0) partial[c][warp] = values[c];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int c = 0; c < kCount; ++c) {
      float value = lane < (blockDim.x + 31) / 32 ? partial[c][lane] : 0.0f;
      for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffff, value, offset);
      if (lane == 0) total[c] = value;
    }
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < kCount; ++c) values[c] = total[c];
}

// Sum of `value` over the block; every thread gets the result.
__device__ float block_sum(float value) {
  float values[1] = {value};
  block_sums(values);
  return values[0];
}

// kCount values, loaded and stored as one vector access.
template <typename T, int kCount>
struct alignas(kCount * sizeof(T)) LaneValues {
  T v[kCount];
};

// 16 bytes of values.
template <typename T>
using Pack = LaneValues<T, 16 / sizeof(T)>;

// value + offset rounded to T, as an addition in T rounds before the activation reads it.
template <typename T>
__device__ __forceinline__ float plus_rounded(T value, T offset) {
  return static_cast<float>(static_cast<T>(static_cast<float>(value) + static_cast<float>(offset)));
}

inline bool quad_aligned(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int blocks_for(int64_t total) {
  return static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535 * 8));
}

template <typename F>
void dispatch_float_type(at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat: f(float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    case at::kHalf: f(c10::Half{}); break;
    default: TORCH_CHECK(false, "fused kernels: unsupported dtype ", type);
  }
}

inline const float* optional_data(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

}  // namespace probekit::model::fused
