// queries_and_keys: the queries and keys out of the fused qkv projection, each head RMS-normalized and rotated
// (rotary embedding) in one pass.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// Below this many tokens a pass is a decode step's: the kernels spread each token over more threads.
constexpr int64_t kFewTokens = 256;

// One block per (batch, token, head) over heads then kv heads: optional RMS norm of the head vector, then
// rotation of its first rotary_dim dimensions (rotate-half convention), written as [B, heads, T, head_dim].
template <typename T>
__global__ void queries_and_keys_kernel(const T* qkv, T* queries, T* keys, const float* q_weight,
                                        const float* k_weight, const float* cos, const float* sin, int64_t tokens,
                                        int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rotary_dim,
                                        float eps) {
  extern __shared__ float values[];
  int64_t all_heads = heads + kv_heads;
  int64_t head = blockIdx.x % all_heads;
  int64_t token = (blockIdx.x / all_heads) % tokens;
  int64_t batch = blockIdx.x / (all_heads * tokens);
  bool is_query = head < heads;
  const float* weight = is_query ? q_weight : k_weight;
  const T* in = qkv + (batch * tokens + token) * (heads + 2 * kv_heads) * head_dim + head * head_dim;
  float squares = 0;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float v = load(in, i);
    values[i] = v;
    squares += v * v;
  }
  float scale = weight != nullptr ? rsqrtf(block_sum(squares) / static_cast<float>(head_dim) + eps) : 1.0f;
  __syncthreads();
  if (weight != nullptr) {
    for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) values[i] = values[i] * scale * weight[i];
    __syncthreads();
  }
  int64_t out_head = is_query ? head : head - heads;
  int64_t out_heads = is_query ? heads : kv_heads;
  T* out = (is_query ? queries : keys) + ((batch * tokens + token) * out_heads + out_head) * head_dim;
  const float* c = cos + (batch * tokens + token) * rotary_dim;
  const float* s = sin + (batch * tokens + token) * rotary_dim;
  int64_t half = rotary_dim / 2;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float v = values[i];
    if (i < half) {
      v = v * c[i] - values[i + half] * s[i];
    } else if (i < rotary_dim) {
      v = v * c[i] + values[i - half] * s[i];
    }
    store(out, i, v);
  }
}

// The same with one warp per (batch, token, head) row, no shared memory and no block barrier: lane l holds
// elements l, l + 32, ... (kPerLane of them, head_dim = 32 kPerLane). With half the rotary width a multiple of
// 32, the rotate-half partner of each element is in the same lane.
template <typename T, int kPerLane>
__global__ void queries_and_keys_warp_kernel(const T* qkv, T* queries, T* keys, const float* q_weight,
                                             const float* k_weight, const float* cos, const float* sin, int64_t rows,
                                             int64_t tokens, int64_t heads, int64_t kv_heads, int64_t rotary_dim,
                                             float eps) {
  constexpr int64_t kHeadDim = 32 * kPerLane;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t all_heads = heads + kv_heads, head = row % all_heads;
  const int64_t token = (row / all_heads) % tokens, batch = row / (all_heads * tokens);
  const bool is_query = head < heads;
  const float* weight = is_query ? q_weight : k_weight;
  const T* in = qkv + (batch * tokens + token) * (heads + 2 * kv_heads) * kHeadDim + head * kHeadDim;
  float v[kPerLane];
  float squares = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    v[j] = load(in, lane + 32 * j);
    squares += v[j] * v[j];
  }
  if (weight != nullptr) {
    for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffff, squares, offset);
    const float scale = rsqrtf(squares / static_cast<float>(kHeadDim) + eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = v[j] * scale * weight[lane + 32 * j];
  }
  const int64_t out_head = is_query ? head : head - heads, out_heads = is_query ? heads : kv_heads;
  T* out = (is_query ? queries : keys) + ((batch * tokens + token) * out_heads + out_head) * kHeadDim;
  const float* c = cos + (batch * tokens + token) * rotary_dim;
  const float* s = sin + (batch * tokens + token) * rotary_dim;
  const int half_slots = static_cast<int>(rotary_dim / 64), rotary_slots = static_cast<int>(rotary_dim / 32);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    float result = v[j];
    if (j < rotary_slots) {
      const int partner_slot = j < half_slots ? j + half_slots : j - half_slots;
      float partner = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) partner = k == partner_slot ? v[k] : partner;  // stays in registers
      result = j < half_slots ? v[j] * c[i] - partner * s[i] : v[j] * c[i] + partner * s[i];
    }
    store(out, i, result);
  }
}

// The same for 2-byte values and a rotary embedding over the whole head, with one group of kLanes lanes per
// token going through all of its heads (head_dim = 8 kLanes): lane l holds elements [8 l, 8 l + 8) of the head
// as one 16-byte access, and the rotate-half partner of each element is in lane l ^ kLanes / 2. Each lane reads
// its rotary factors and norm weights once per token instead of once per head: a group per head read the
// tables 12 times per token for Gemma 3 and moved 2.1 TB/s in the capture benchmark, against the 4 TB/s of the
// other element-wise kernels. The tables repeat their first half (angles = cat(frequencies, frequencies), as
// AttentionContext::rotary builds them), so only that half is read.
template <typename T, int kLanes>
__global__ void queries_and_keys_tokens_kernel(const T* __restrict__ qkv, T* __restrict__ queries,
                                               T* __restrict__ keys, const float* __restrict__ q_weight,
                                               const float* __restrict__ k_weight, const float* __restrict__ cos,
                                               const float* __restrict__ sin, int64_t token_count, int heads,
                                               int kv_heads, int head_groups, float eps) {
  constexpr int kHeadDim = 8 * kLanes, kHeadsAtOnce = 4;
  const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, item = thread / kLanes;
  const int lane = static_cast<int>(thread % kLanes);
  // Every lane of a warp takes part in the shuffles: a token past the end works on token 0 and stores nothing.
  const bool valid = item / head_groups < token_count;
  const int64_t token = valid ? item / head_groups : 0;
  const int64_t table_offset = token * kHeadDim + 8 * (lane % (kLanes / 2));
  const float4 c0 = reinterpret_cast<const float4*>(cos + table_offset)[0];
  const float4 c1 = reinterpret_cast<const float4*>(cos + table_offset)[1];
  const float4 s0 = reinterpret_cast<const float4*>(sin + table_offset)[0];
  const float4 s1 = reinterpret_cast<const float4*>(sin + table_offset)[1];
  const float cs[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float ss[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  float qw[8], kw[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    qw[j] = q_weight != nullptr ? q_weight[8 * lane + j] : 1.0f;
    kw[j] = k_weight != nullptr ? k_weight[8 * lane + j] : 1.0f;
  }
  const int all_heads = heads + kv_heads, per_group = (all_heads + head_groups - 1) / head_groups;
  const int first_head = static_cast<int>(item % head_groups) * per_group, end = min(all_heads, first_head + per_group);
  const auto* in = reinterpret_cast<const Pack<T>*>(qkv + token * (heads + 2 * kv_heads) * kHeadDim) + lane;
  const bool first_half = lane < kLanes / 2;
  for (int first = first_head; first < end; first += kHeadsAtOnce) {
    Pack<T> loaded[kHeadsAtOnce];
#pragma unroll
    for (int i = 0; i < kHeadsAtOnce; ++i) {
      if (first + i < end) loaded[i] = in[(first + i) * kLanes];
    }
#pragma unroll
    for (int i = 0; i < kHeadsAtOnce; ++i) {
      const int head = first + i;
      if (head >= end) break;  // the same for every lane of the warp
      const bool is_query = head < heads;
      float v[8];
      float squares = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = static_cast<float>(loaded[i].v[j]);
        squares += v[j] * v[j];
      }
      if ((is_query ? q_weight : k_weight) != nullptr) {
#pragma unroll
        for (int offset = kLanes / 2; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffff, squares, offset);
        const float scale = rsqrtf(squares / static_cast<float>(kHeadDim) + eps);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = v[j] * scale * (is_query ? qw[j] : kw[j]);
      }
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float partner = __shfl_xor_sync(0xffffffff, v[j], kLanes / 2);
        out.v[j] = static_cast<T>(first_half ? v[j] * cs[j] - partner * ss[j] : v[j] * cs[j] + partner * ss[j]);
      }
      if (!valid) continue;
      T* target = is_query ? queries + (token * heads + head) * kHeadDim
                           : keys + (token * kv_heads + head - heads) * kHeadDim;
      reinterpret_cast<Pack<T>*>(target)[lane] = out;
    }
  }
}

}  // namespace

std::pair<at::Tensor, at::Tensor> queries_and_keys(const at::Tensor& qkv_in, int64_t heads, int64_t kv_heads,
                                                   int64_t head_dim, const at::Tensor& q_weight,
                                                   const at::Tensor& k_weight, double eps, const at::Tensor& cos_in,
                                                   const at::Tensor& sin_in, int64_t rotary_dim) {
  c10::cuda::CUDAGuard guard(qkv_in.device());
  at::Tensor qkv = qkv_in.contiguous();
  at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  int64_t batch = qkv.size(0), tokens = qkv.size(1);
  // Written token-major [B, T, heads, head_dim] and returned as transposed views: the flash kernel's output
  // takes the queries' layout, and token-major it is the [B, T, heads * head_dim] the output projection reads
  // (head-major cost a strided copy of it per layer, 2% of the capture benchmark's GPU time).
  at::Tensor queries = at::empty({batch, tokens, heads, head_dim}, qkv.options());
  at::Tensor keys = at::empty({batch, tokens, kv_heads, head_dim}, qkv.options());
  int64_t blocks = batch * tokens * (heads + kv_heads);
  if (blocks == 0) return {queries.transpose(1, 2), keys.transpose(1, 2)};
  int threads = static_cast<int>(std::min<int64_t>(256, ((head_dim + 31) / 32) * 32));
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t rows_per_block = kThreads / 32, warp_blocks = (blocks + rows_per_block - 1) / rows_per_block;
  const bool by_warp = rotary_dim % 64 == 0 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
  const bool by_packs = by_warp && rotary_dim == head_dim && qkv.element_size() == 2 &&
                        reinterpret_cast<uintptr_t>(qkv.data_ptr()) % 16 == 0 && quad_aligned(cos.data_ptr()) &&
                        quad_aligned(sin.data_ptr()) && quad_aligned(q_weight.defined() ? q_weight.data_ptr() : nullptr) &&
                        quad_aligned(k_weight.defined() ? k_weight.data_ptr() : nullptr);
  dispatch_float_type(qkv.scalar_type(), [&](auto type) {
    using T = decltype(type);
    if constexpr (sizeof(T) == 2) {
      if (by_packs) {
        const int lanes = static_cast<int>(head_dim / 8);
        auto kernel = lanes == 8 ? queries_and_keys_tokens_kernel<T, 8>
                      : lanes == 16 ? queries_and_keys_tokens_kernel<T, 16> : queries_and_keys_tokens_kernel<T, 32>;
        // A decode step's few tokens: a group of lanes per 4 heads of a token, not per token, so that more than a
        // dozen warps share the work (the tables are then read once per group rather than per token).
        const int64_t token_count = batch * tokens;
        const int head_groups = token_count < kFewTokens ? static_cast<int>((heads + kv_heads + 3) / 4) : 1;
        const int64_t pack_blocks = (token_count * head_groups * lanes + kThreads - 1) / kThreads;
        kernel<<<pack_blocks, kThreads, 0, stream>>>(qkv.data_ptr<T>(), queries.data_ptr<T>(), keys.data_ptr<T>(),
                                                     optional_data(q_weight), optional_data(k_weight),
                                                     cos.data_ptr<float>(), sin.data_ptr<float>(), token_count,
                                                     static_cast<int>(heads), static_cast<int>(kv_heads), head_groups,
                                                     static_cast<float>(eps));
        return;
      }
    }
    if (by_warp) {
      auto kernel = head_dim == 64 ? queries_and_keys_warp_kernel<T, 2>
                    : head_dim == 128 ? queries_and_keys_warp_kernel<T, 4> : queries_and_keys_warp_kernel<T, 8>;
      kernel<<<warp_blocks, kThreads, 0, stream>>>(qkv.data_ptr<T>(), queries.data_ptr<T>(), keys.data_ptr<T>(),
                                                   optional_data(q_weight), optional_data(k_weight),
                                                   cos.data_ptr<float>(), sin.data_ptr<float>(), blocks, tokens, heads,
                                                   kv_heads, rotary_dim, static_cast<float>(eps));
      return;
    }
    queries_and_keys_kernel<T><<<blocks, threads, head_dim * sizeof(float), stream>>>(
        qkv.data_ptr<T>(), queries.data_ptr<T>(), keys.data_ptr<T>(), optional_data(q_weight), optional_data(k_weight),
        cos.data_ptr<float>(), sin.data_ptr<float>(), tokens, heads, kv_heads, head_dim, rotary_dim,
        static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {queries.transpose(1, 2), keys.transpose(1, 2)};
}

}  // namespace probekit::model::fused
