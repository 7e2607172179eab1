// What cached_attention.cu's two kernels share: their arguments, and the tiled kernel's entry (its own file).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace probekit::model::fused {

// A cached attention's operands: the pass's queries [B, heads, T, D], keys and values [B, kv_heads, T, D] (views
// with their strides, unit stride within a head row), the cache [B, kv_heads, capacity, D], each token's position
// [B, T] (consecutive within a row) and the output [B, T, heads, D] (token-major).
template <typename T>
struct CachedAttentionArguments {
  const T* queries;
  const T* keys;
  const T* values;
  int64_t q_batch, q_head, q_token, k_batch, k_head, k_token, v_batch, v_head, v_token;
  T* cache_keys;
  T* cache_values;
  const int64_t* positions;
  const float* sinks;  // [heads] or null
  T* out;
  int heads, kv_heads, tokens;
  int64_t capacity, visible, window;
  float scale;
};

// The tiled kernel's scratch where it has more than one split: each split's running maximum and sum [B, kv_heads,
// splits, rows, 2] and unnormalized output [B, kv_heads, splits, rows, D] (rows: a kv head's query heads times the
// pass's tokens), in fp32.
struct TiledScratch {
  float* statistics;
  float* partial;
  int splits;
};

// How many splits of the visible slots the tiled kernel runs for `batch` rows: about a block per multiprocessor.
int tiled_cached_attention_splits(int64_t batch, int64_t kv_heads, int64_t visible);

// Runs the tiled kernel and, past one split, the kernel combining the splits into a.out. T is c10::BFloat16 or
// c10::Half.
template <typename T>
void launch_tiled_cached_attention(const CachedAttentionArguments<T>& a, int64_t head_dim, int64_t batch,
                                   const TiledScratch& scratch, cudaStream_t stream);

}  // namespace probekit::model::fused
