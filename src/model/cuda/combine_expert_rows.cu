// combine_expert_rows: the routed experts' output rows, plus their biases, weighted and summed per token in fp32.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// One thread a pack of one token's output: its k rows' packs, each plus its expert's bias rounded to T (as an
// addition in T rounds), weighted and summed in fp32 in the order of the token's choices (nvcc contracts each step
// into a fused multiply-add: within an fp32 rounding of ATen's multiply then sum).
template <typename T>
__global__ void combine_expert_rows_kernel(const T* __restrict__ rows, const int64_t* __restrict__ row_of_pair,
                                           const int64_t* __restrict__ pair_experts, const float* __restrict__ weights,
                                           const T* __restrict__ bias, float* __restrict__ out, int64_t hidden, int k,
                                           int64_t blocks_per_token) {
  constexpr int kWidth = 16 / sizeof(T);
  const int64_t token = blockIdx.x / blocks_per_token;
  const int64_t pack = (blockIdx.x % blocks_per_token) * blockDim.x + threadIdx.x;
  if (pack * kWidth >= hidden) return;
  float sum[kWidth] = {};
  for (int j = 0; j < k; ++j) {
    const int64_t pair = token * k + j;
    const Pack<T> values = reinterpret_cast<const Pack<T>*>(rows + row_of_pair[pair] * hidden)[pack];
    Pack<T> offsets{};
    if (bias != nullptr) offsets = reinterpret_cast<const Pack<T>*>(bias + pair_experts[pair] * hidden)[pack];
    const float weight = weights[pair];
#pragma unroll
    for (int q = 0; q < kWidth; ++q) {
      const float value = bias != nullptr ? plus_rounded(values.v[q], offsets.v[q]) : static_cast<float>(values.v[q]);
      sum[q] += weight * value;
    }
  }
  auto* target = reinterpret_cast<float4*>(out + token * hidden + pack * kWidth);
#pragma unroll
  for (int q = 0; q < kWidth / 4; ++q) target[q] = make_float4(sum[4 * q], sum[4 * q + 1], sum[4 * q + 2], sum[4 * q + 3]);
}

}  // namespace

at::Tensor combine_expert_rows(const at::Tensor& rows, const at::Tensor& row_of_pair, const at::Tensor& pair_experts,
                               const at::Tensor& weights, const at::Tensor& bias) {
  const int64_t tokens = weights.size(0), k = weights.size(1), hidden = rows.size(1);
  const int64_t width = 16 / rows.element_size();
  const bool fits = rows.is_contiguous() && hidden % width == 0 && quad_aligned(rows.data_ptr()) &&
                    (!bias.defined() || (bias.is_contiguous() && bias.scalar_type() == rows.scalar_type() &&
                                         quad_aligned(bias.data_ptr())));
  const int threads = 128;
  const int64_t blocks_per_token = (hidden / width + threads - 1) / threads;
  if (!fits || tokens * blocks_per_token > INT32_MAX) return {};
  c10::cuda::CUDAGuard guard(rows.device());
  at::Tensor out = at::empty({tokens, hidden}, rows.options().dtype(at::kFloat));
  if (tokens == 0 || hidden == 0) return out;
  at::Tensor positions = row_of_pair.contiguous(), experts = pair_experts.contiguous();
  at::Tensor weights32 = weights.to(at::kFloat).contiguous();
  dispatch_float_type(rows.scalar_type(), [&](auto type) {
    using T = decltype(type);
    combine_expert_rows_kernel<T><<<tokens * blocks_per_token, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        rows.data_ptr<T>(), positions.data_ptr<int64_t>(), experts.data_ptr<int64_t>(), weights32.data_ptr<float>(),
        bias.defined() ? bias.data_ptr<T>() : nullptr, out.data_ptr<float>(), hidden, static_cast<int>(k),
        blocks_per_token);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace probekit::model::fused
