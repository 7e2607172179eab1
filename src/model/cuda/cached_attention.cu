// cached_attention: generation's attention over its KV cache, which also writes the pass's keys and values into the
// cache: the per-query kernel here, and the dispatch between it and the tiled kernel (cached_attention_tiled.cu).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cached_attention.cuh"
#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// The block's end of cached_attention_kernel: each warp's running maximum, sum and weighted values (merged[w]:
// kHeadDim values, then the maximum and the sum) combined into the query's output row; `sink_logit` (or null) is
// the head's sink logit, which joins the denominator and brings no value.
template <typename T, int kHeadDim, int kWarps>
__device__ void write_merged_row(const float (&merged)[kWarps][kHeadDim + 2], const float* sink_logit, T* out_row) {
  float overall = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) overall = fmaxf(overall, merged[w][kHeadDim]);
  const float sink = sink_logit != nullptr ? __expf(*sink_logit - overall) : 0.0f;
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float numerator = 0, denominator = sink;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = merged[w][kHeadDim] == -INFINITY ? 0.0f : __expf(merged[w][kHeadDim] - overall);
      numerator += weight * merged[w][d];
      denominator += weight * merged[w][kHeadDim + 1];
    }
    out_row[d] = static_cast<T>(denominator > 0 ? numerator / denominator : 0.0f);
  }
}

// Lane `lane`'s elements of a head row from `from` to `to`.
template <typename Lanes, typename T>
__device__ __forceinline__ void copy_lanes(const T* from, T* to, int lane) {
  reinterpret_cast<Lanes*>(to)[lane] = reinterpret_cast<const Lanes*>(from)[lane];
}

// One block per query row (batch, head, token), kWarps warps sharing the visible slots round-robin, kAtOnce at a
// time, their keys and values loaded together: one round of memory latency per group (the values' loads after the
// scores made two, and a decode step's attention waited on them); lane l holds elements [kPerLane l,
// kPerLane (l + 1)) of the head. Each warp keeps its own running maximum, sum and weighted values (the online
// softmax), merged through shared memory at the end. The pass's own slots are read from its keys and values, and
// the first query head of each kv head writes its token's key and value into the cache: no kernel before this
// one writes them, and no block here reads those cache slots.
template <typename T, int kPerLane, int kWarps, int kAtOnce>
__global__ void cached_attention_kernel(CachedAttentionArguments<T> a) {
  constexpr int kHeadDim = 32 * kPerLane;
  using Lanes = LaneValues<T, kPerLane>;  // a lane's elements of a head row (rows on 16-byte boundaries: serves())
  __shared__ float merged[kWarps][kHeadDim + 2];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int token = blockIdx.x % a.tokens, head = (blockIdx.x / a.tokens) % a.heads;
  const int64_t batch = blockIdx.x / (static_cast<int64_t>(a.tokens) * a.heads);
  const int group = a.heads / a.kv_heads, kv_head = head / group;
  const int64_t position = a.positions[batch * a.tokens + token], start = a.positions[batch * a.tokens];
  // The slots this query sees: [first, last] within the visible ones.
  const int64_t last = position < a.visible - 1 ? position : a.visible - 1;
  const int64_t first = a.window > 0 && position - a.window + 1 > 0 ? position - a.window + 1 : 0;
  const Lanes q_lanes =
      reinterpret_cast<const Lanes*>(a.queries + batch * a.q_batch + head * a.q_head + token * a.q_token)[lane];
  float q[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) q[j] = static_cast<float>(q_lanes.v[j]) * a.scale;
  const int64_t cache_row = (batch * a.kv_heads + kv_head) * a.capacity * kHeadDim;
  const T* pass_keys = a.keys + batch * a.k_batch + kv_head * a.k_head;
  const T* pass_values = a.values + batch * a.v_batch + kv_head * a.v_head;
  if (head % group == 0 && warp == 0) {
    copy_lanes<Lanes>(pass_keys + token * a.k_token, a.cache_keys + cache_row + position * kHeadDim, lane);
    copy_lanes<Lanes>(pass_values + token * a.v_token, a.cache_values + cache_row + position * kHeadDim, lane);
  }
  float maximum = -INFINITY, sum = 0, acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) acc[j] = 0;
  for (int64_t base = first + warp * kAtOnce; base <= last; base += kWarps * kAtOnce) {
    Lanes k[kAtOnce], v[kAtOnce];
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      const int64_t slot = base + i < last ? base + i : last;
      const bool in_pass = slot >= start;
      k[i] = reinterpret_cast<const Lanes*>(in_pass ? pass_keys + (slot - start) * a.k_token
                                                    : a.cache_keys + cache_row + slot * kHeadDim)[lane];
      v[i] = reinterpret_cast<const Lanes*>(in_pass ? pass_values + (slot - start) * a.v_token
                                                    : a.cache_values + cache_row + slot * kHeadDim)[lane];
    }
    float score[kAtOnce];
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      float dot = 0;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) dot += q[j] * static_cast<float>(k[i].v[j]);
      score[i] = dot;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) score[i] += __shfl_xor_sync(0xffffffff, score[i], offset);
    }
    float group_max = maximum;
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      if (base + i <= last) group_max = fmaxf(group_max, score[i]);
    }
    const float correction = __expf(maximum - group_max);
    sum *= correction;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) acc[j] *= correction;
    maximum = group_max;
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      if (base + i > last) break;
      const float p = __expf(score[i] - maximum);
      sum += p;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[j] += p * static_cast<float>(v[i].v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) merged[warp][kPerLane * lane + j] = acc[j];
  if (lane == 0) {
    merged[warp][kHeadDim] = maximum;
    merged[warp][kHeadDim + 1] = sum;
  }
  __syncthreads();
  write_merged_row<T, kHeadDim, kWarps>(merged, a.sinks != nullptr ? &a.sinks[head] : nullptr,
                                        a.out + ((batch * a.tokens + token) * a.heads + head) * kHeadDim);
}

}  // namespace

bool cached_attention_takes(at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t tokens) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  // A prefill's many queries take the tiled kernels: this one gives each query a block of its own.
  return tokens <= kCachedAttentionMaxTokens && kv_heads > 0 && heads % kv_heads == 0;
}

bool cached_attention_serves(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cache_keys,
                             const at::Tensor& cache_values) {
  const int64_t head_dim = q.size(-1);
  if (!q.is_cuda() || !cached_attention_takes(q.scalar_type(), q.size(1), k.size(1), head_dim, q.size(2))) return false;
  for (const at::Tensor* t : {&q, &k, &v, &cache_keys, &cache_values}) {
    if (t->scalar_type() != q.scalar_type() || t->size(-1) != head_dim || t->stride(-1) != 1) return false;
    // Each lane moves its elements as one vector access: rows and their starts on 16-byte boundaries.
    for (int64_t d = 0; d < 3; ++d) {
      if (t->stride(d) % 8 != 0) return false;
    }
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
  }
  return cache_keys.is_contiguous() && cache_values.is_contiguous();
}

namespace {

// The tiled kernel where it takes the shape, and the batch has 4 rows or more or the rows see more than
// kCachedAttentionShortSlots slots. With few rows over few slots the per-query kernel's blocks (one per query) were
// the quicker: the Gemma-3-4B-shaped decode step at 185 slots 3.14 against 3.37 ms at one row, 3.34 against 3.45 at
// two, 3.47 against 3.41 at four, 5.51 against 4.28 at 16 (bench/results/streams_h200_2026-11-30b.md). Over long rows
// each of those blocks reads all its kv head's slots, and one row's step at 1,141 slots took 3.99 ms against the
// tiled kernel's 3.32 (bench/results/decode_persistent_h200_2026-12-01.md).
bool tiled_chosen(CachedAttentionKernel kernel, int64_t batch, int64_t heads, int64_t kv_heads, int64_t head_dim,
                  int64_t tokens, int64_t visible) {
  if (kernel == CachedAttentionKernel::kPerQuery) return false;
  const bool takes = tiled_cached_attention_takes(heads, kv_heads, head_dim, tokens);
  TORCH_CHECK(takes || kernel != CachedAttentionKernel::kTiled, "cached_attention: the tiled kernel does not take ",
              heads, " heads over ", kv_heads, " of ", head_dim, " at ", tokens, " tokens on this device");
  return takes && (kernel == CachedAttentionKernel::kTiled || batch >= 4 || visible > kCachedAttentionShortSlots);
}

}  // namespace

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& cache_keys,
                            at::Tensor& cache_values, const at::Tensor& positions_in, int64_t visible, int64_t window,
                            double scale, const at::Tensor& sinks_in, CachedAttentionKernel kernel) {
  c10::cuda::CUDAGuard guard(q.device());
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), capacity = cache_keys.size(2);
  TORCH_CHECK(cached_attention_serves(q, k, v, cache_keys, cache_values), "cached_attention: unsupported inputs");
  at::Tensor positions = positions_in.to(at::kLong).contiguous();
  at::Tensor sinks = sinks_in.defined() ? sinks_in.to(q.device(), at::kFloat).contiguous() : at::Tensor();
  at::Tensor out = at::empty({batch, tokens, heads, head_dim}, q.options());  // token-major: the kernels' rows
  const bool tiled = tiled_chosen(kernel, batch, heads, kv_heads, head_dim, tokens, visible);
  auto stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(q.scalar_type(), [&](auto type) {
    using T = decltype(type);
    if constexpr (sizeof(T) == 2) {
      const CachedAttentionArguments<T> arguments{
          q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), q.stride(0), q.stride(1), q.stride(2), k.stride(0),
          k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), cache_keys.data_ptr<T>(),
          cache_values.data_ptr<T>(), positions.data_ptr<int64_t>(), optional_data(sinks), out.data_ptr<T>(),
          static_cast<int>(heads), static_cast<int>(kv_heads), static_cast<int>(tokens), capacity, visible, window,
          static_cast<float>(scale)};
      if (tiled) {
        const int splits = tiled_cached_attention_splits(batch, kv_heads, visible);
        const int64_t rows = splits > 1 ? batch * kv_heads * splits * (heads / kv_heads) * tokens : 0;
        at::Tensor statistics = at::empty({rows, 2}, q.options().dtype(at::kFloat));
        at::Tensor partial = at::empty({rows, head_dim}, q.options().dtype(at::kFloat));
        launch_tiled_cached_attention(arguments, head_dim, batch,
                                      TiledScratch{statistics.data_ptr<float>(), partial.data_ptr<float>(), splits},
                                      stream);
        return;
      }
      // 16 warps walking 4 slots at a time: the quickest of the shapes timed at a decode step's 13 tokens
      // (bench/results/chat_server_h200_2026-11-26d.md).
      constexpr int kWarps = 16, kAtOnce = 4;
      auto per_query = head_dim == 64    ? cached_attention_kernel<T, 2, kWarps, kAtOnce>
                       : head_dim == 128 ? cached_attention_kernel<T, 4, kWarps, kAtOnce>
                                         : cached_attention_kernel<T, 8, kWarps, kAtOnce>;
      per_query<<<batch * heads * tokens, 32 * kWarps, 0, stream>>>(arguments);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return out.transpose(1, 2);
}

}  // namespace probekit::model::fused
