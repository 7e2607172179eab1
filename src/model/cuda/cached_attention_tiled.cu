// cached_attention's tiled kernel: a block per (row of the batch, kv head, split of the visible slots) reads each
// key and value once for all the queries that share them (the kv head's query heads times the pass's tokens) and
// multiplies them on the tensor cores; a second kernel combines the splits. The per-query kernel
// (cached_attention.cu) reads the slots once per query: at 16 rows of 13 tokens that was 26 reads of each, and its
// step waited on the L2 (bench/results/streams_h200_2026-11-30.md).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "model/cuda/cached_attention.cuh"
#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

constexpr int kChunk = 64;     // slots a block holds at a time
constexpr int kMaxWarps = 16;  // a block's warps: one per 16 queries x 16 slots of a chunk's scores
constexpr int kMaxTasks = 2;   // output tiles (16 queries x 64 values) a warp accumulates
static_assert(kChunk == 64, "softmax_chunk gives each lane two slots of a chunk");

__device__ __forceinline__ int64_t smaller(int64_t x, int64_t y) { return x < y ? x : y; }

// The block's shared memory. Rows are padded by 8 elements (4 banks) so that the 8 rows of 16 bytes that ldmatrix
// reads for one matrix fall in 32 distinct banks.
struct TileLayout {
  int head_dim, rows_padded;  // rows_padded: the queries rounded up to the 16 of a tensor-core tile
  static constexpr int kScoreRow = kChunk + 4;        // floats
  static constexpr int kProbabilityRow = kChunk + 8;  // elements
  __host__ __device__ int row() const { return head_dim + 8; }  // elements of a key, value or query row
  // Two buffers of a chunk's keys and values: the next chunk loads while this one is multiplied.
  __host__ __device__ size_t keys(int buffer) const { return size_t(buffer) * 2 * kChunk * row() * 2; }
  __host__ __device__ size_t values(int buffer) const { return keys(buffer) + size_t{kChunk} * row() * 2; }
  __host__ __device__ size_t queries() const { return keys(2); }
  __host__ __device__ size_t scores() const { return queries() + size_t(rows_padded) * row() * 2; }
  __host__ __device__ size_t probabilities() const { return scores() + size_t(rows_padded) * kScoreRow * 4; }
  // Each query's running maximum, sum and the last chunk's correction of its accumulators.
  __host__ __device__ size_t row_state() const { return probabilities() + size_t(rows_padded) * kProbabilityRow * 2; }
  // Each token's first and last visible slot (int64).
  __host__ __device__ size_t bounds() const { return row_state() + size_t(rows_padded) * 3 * 4; }
  __host__ __device__ size_t bytes() const { return bounds() + 2 * kCachedAttentionMaxTokens * 8; }
  // The calling warp's n-th output tile (16 queries x 64 values): its first query row and first value, or false
  // where the warp has no n-th tile.
  __device__ bool output_tile(int n, int& row0, int& value0) const {
    const int value_tiles = head_dim / 64, task = threadIdx.x / 32 + n * (blockDim.x / 32);
    row0 = task / value_tiles * 16, value0 = task % value_tiles * 64;
    return task < rows_padded / 16 * value_tiles;
  }
};

// d += a b on the tensor cores: a 16 x 16 tile of T (row-major fragment), b 16 x 8 (column-major), d fp32.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // tiled_cached_attention_takes declines code built for older devices
#endif
}

// Four 8 x 8 matrices of 16-bit elements from shared memory, each row 16 contiguous bytes whose address lane
// 8 m + r gives (matrix m, row r): register m of each lane holds its fragment of matrix m, the lane's row lane / 4 and
// columns 2 (lane % 4) + {0, 1}, or with kTransposed those rows of column lane / 4. One instruction where loading
// each register's pair (or, transposed, each element) took one of its own.
template <bool kTransposed>
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const void* row_address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  if constexpr (kTransposed) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// The row this lane addresses in load_matrices for a row-major 16 x 16 tile at (row0, column0) of a matrix with
// rows `row` elements apart, as mma_m16n8k16's a operand takes it: matrices (rows 0-7, columns 0-7), (8-15, 0-7),
// (0-7, 8-15), (8-15, 8-15).
template <typename T>
__device__ __forceinline__ const T* a_tile_row(const T* matrix, int row, int row0, int column0) {
  const int lane = threadIdx.x % 32;
  return matrix + (row0 + lane % 8 + 8 * (lane / 8 % 2)) * row + column0 + 8 * (lane / 16);
}

// 16 bytes from global to shared memory without passing through registers; zeros where !real (nothing is read).
__device__ __forceinline__ void copy_async(void* to, const void* from, bool real) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from), "r"(real ? 16 : 0));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Waits until at most kPending groups of this thread's copies are in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Where the block works: its row of the batch, kv head and split, and its operands' rows.
template <typename T, int kHeadDim>
struct TileBlock {
  const CachedAttentionArguments<T>& a;
  TileLayout layout;
  int group, rows, split, kv_head;
  int64_t batch, start, end;  // the pass's first slot; the last slot any of its queries sees
  const T* pass_keys;
  const T* pass_values;
  int64_t cache_row;  // the block's kv head's first element in the cache

  __device__ TileBlock(const CachedAttentionArguments<T>& arguments, int splits)
      : a(arguments),
        layout{kHeadDim, 0},
        group(a.heads / a.kv_heads),
        rows(group * a.tokens),
        split(static_cast<int>(blockIdx.x % splits)),
        kv_head(static_cast<int>(blockIdx.x / splits % a.kv_heads)),
        batch(blockIdx.x / splits / a.kv_heads) {
    layout.rows_padded = (rows + 15) / 16 * 16;
    const int64_t* positions = a.positions + batch * a.tokens;
    start = positions[0];
    end = smaller(positions[a.tokens - 1], a.visible - 1);
    pass_keys = a.keys + batch * a.k_batch + kv_head * a.k_head;
    pass_values = a.values + batch * a.v_batch + kv_head * a.v_head;
    cache_row = (batch * a.kv_heads + kv_head) * a.capacity * kHeadDim;
  }

  // Slot `slot`'s key (or value): the pass's own slots from its keys and values, the earlier ones from the cache.
  __device__ const T* slot_row(int64_t slot, bool value) const {
    if (slot >= start) return (value ? pass_values : pass_keys) + (slot - start) * (value ? a.v_token : a.k_token);
    return (value ? a.cache_values : a.cache_keys) + cache_row + slot * kHeadDim;
  }
};

// The block's queries into shared memory (row r: token r / group, query head r % group of the kv head; padding rows
// zero), each token's visible slots, the rows' running state; the first split writes the pass's keys and values
// into the cache (no block reads those slots: a pass's own slots are read from its keys and values).
template <typename T, int kHeadDim>
__device__ void begin_block(const TileBlock<T, kHeadDim>& b, bool has_chunks, unsigned char* shared) {
  constexpr int kPacks = kHeadDim / 8;
  const auto& a = b.a;
  T* queries = reinterpret_cast<T*>(shared + b.layout.queries());
  for (int i = threadIdx.x; has_chunks && i < b.layout.rows_padded * kPacks; i += blockDim.x) {
    const int r = i / kPacks, pack = i % kPacks, head = b.kv_head * b.group + r % b.group;
    const bool real = r < b.rows;
    const T* from = a.queries + b.batch * a.q_batch + head * a.q_head + (r / b.group) * a.q_token + pack * 8;
    copy_async(queries + r * b.layout.row() + pack * 8, real ? from : a.queries, real);
  }
  auto* bounds = reinterpret_cast<int64_t*>(shared + b.layout.bounds());
  for (int t = threadIdx.x; t < a.tokens; t += blockDim.x) {
    const int64_t position = a.positions[b.batch * a.tokens + t];
    bounds[2 * t] = a.window > 0 && position - a.window + 1 > 0 ? position - a.window + 1 : 0;
    bounds[2 * t + 1] = smaller(position, a.visible - 1);
  }
  auto* state = reinterpret_cast<float*>(shared + b.layout.row_state());
  for (int r = threadIdx.x; r < b.layout.rows_padded; r += blockDim.x) {
    state[3 * r] = -INFINITY, state[3 * r + 1] = 0, state[3 * r + 2] = 0;
  }
  if (b.split != 0) return;
  for (int i = threadIdx.x; i < a.tokens * kPacks; i += blockDim.x) {
    const int t = i / kPacks, pack = i % kPacks;
    const int64_t to = b.cache_row + a.positions[b.batch * a.tokens + t] * kHeadDim + pack * 8;
    using P = Pack<T>;
    *reinterpret_cast<P*>(a.cache_keys + to) = *reinterpret_cast<const P*>(b.pass_keys + t * a.k_token + pack * 8);
    *reinterpret_cast<P*>(a.cache_values + to) = *reinterpret_cast<const P*>(b.pass_values + t * a.v_token + pack * 8);
  }
}

// Starts copying the chunk's keys and values from `chunk_start` into `buffer`, as one group of copies; zeros past
// the last slot seen.
template <typename T, int kHeadDim>
__device__ void load_chunk(const TileBlock<T, kHeadDim>& b, int64_t chunk_start, int buffer, unsigned char* shared) {
  constexpr int kPacks = kHeadDim / 8;
  T* keys = reinterpret_cast<T*>(shared + b.layout.keys(buffer));
  T* values = reinterpret_cast<T*>(shared + b.layout.values(buffer));
  for (int i = threadIdx.x; i < 2 * kChunk * kPacks; i += blockDim.x) {
    const bool value = i >= kChunk * kPacks;
    const int j = value ? i - kChunk * kPacks : i, index = j / kPacks, pack = j % kPacks;
    const int64_t slot = chunk_start + index;
    const bool real = slot <= b.end;
    copy_async((value ? values : keys) + index * b.layout.row() + pack * 8,
               real ? b.slot_row(slot, value) + pack * 8 : b.a.keys, real);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Scores of the chunk, scaled, -inf where a query does not see the slot: a warp's task is 16 queries x 16 slots.
template <typename T, int kHeadDim>
__device__ void score_chunk(const TileBlock<T, kHeadDim>& b, int64_t chunk_start, int buffer, unsigned char* shared) {
  const int lane = threadIdx.x % 32, row = b.layout.row();
  const T* keys = reinterpret_cast<const T*>(shared + b.layout.keys(buffer));
  const T* queries = reinterpret_cast<const T*>(shared + b.layout.queries());
  auto* scores = reinterpret_cast<float*>(shared + b.layout.scores());
  const auto* bounds = reinterpret_cast<const int64_t*>(shared + b.layout.bounds());
  constexpr int kSlotTiles = kChunk / 16;
  for (int task = threadIdx.x / 32; task < b.layout.rows_padded / 16 * kSlotTiles; task += blockDim.x / 32) {
    const int row0 = task / kSlotTiles * 16, slot0 = task % kSlotTiles * 16;
    const T* q = a_tile_row(queries, row, row0, 0);
    // The keys' rows are the slots: matrices (slots 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) give
    // b0 and b1 of slots 0-7, then of slots 8-15.
    const T* k = keys + (slot0 + lane % 8 + 8 * (lane / 16)) * row + 8 * (lane / 8 % 2);
    float d[2][4] = {};
#pragma unroll 4
    for (int k0 = 0; k0 < kHeadDim; k0 += 16) {
      uint32_t fragment[4], b[4];
      load_matrices<false>(fragment, q + k0);
      load_matrices<false>(b, k + k0);
      mma_m16n8k16<T>(d[0], fragment, b[0], b[1]);
      mma_m16n8k16<T>(d[1], fragment, b[2], b[3]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // fragment element i: slots tile i / 4, query row + 8 (i / 2 % 2), slot + i % 2
      const int r = row0 + lane / 4 + 8 * (i / 2 % 2), column = slot0 + 8 * (i / 4) + lane % 4 * 2 + i % 2;
      const int64_t slot = chunk_start + column;
      const int t = r / b.group;
      const bool seen = r < b.rows && slot >= bounds[2 * t] && slot <= bounds[2 * t + 1];
      scores[r * TileLayout::kScoreRow + column] = seen ? d[i / 4][i % 4] * b.a.scale : -INFINITY;
    }
  }
}

// The online softmax's step for each query: the chunk's probabilities (rounded to T, as the products take them)
// against the new running maximum, the sum, and the correction of what the accumulators hold.
template <typename T, int kHeadDim>
__device__ void softmax_chunk(const TileBlock<T, kHeadDim>& b, unsigned char* shared) {
  const int lane = threadIdx.x % 32;
  const auto* scores = reinterpret_cast<const float*>(shared + b.layout.scores());
  T* probabilities = reinterpret_cast<T*>(shared + b.layout.probabilities());
  auto* state = reinterpret_cast<float*>(shared + b.layout.row_state());
  for (int r = threadIdx.x / 32; r < b.layout.rows_padded; r += blockDim.x / 32) {
    const float s0 = scores[r * TileLayout::kScoreRow + lane], s1 = scores[r * TileLayout::kScoreRow + lane + 32];
    float maximum = fmaxf(s0, s1);
    for (int offset = 16; offset > 0; offset /= 2) maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffff, maximum, offset));
    const float previous = state[3 * r];
    maximum = fmaxf(maximum, previous);
    const T p0 = static_cast<T>(maximum == -INFINITY ? 0.0f : __expf(s0 - maximum));
    const T p1 = static_cast<T>(maximum == -INFINITY ? 0.0f : __expf(s1 - maximum));
    probabilities[r * TileLayout::kProbabilityRow + lane] = p0;
    probabilities[r * TileLayout::kProbabilityRow + lane + 32] = p1;
    float sum = static_cast<float>(p0) + static_cast<float>(p1);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    if (lane == 0) {
      const float correction = previous == -INFINITY ? 0.0f : __expf(previous - maximum);
      state[3 * r] = maximum, state[3 * r + 1] = state[3 * r + 1] * correction + sum, state[3 * r + 2] = correction;
    }
  }
}

// The warp's output tiles (16 queries x 64 values each) times the correction, plus the chunk's probabilities times
// its values.
template <typename T, int kHeadDim>
__device__ void accumulate_chunk(const TileBlock<T, kHeadDim>& b, int buffer, unsigned char* shared,
                                 float (&out)[kMaxTasks][8][4]) {
  const int lane = threadIdx.x % 32, row = b.layout.row();
  const T* values = reinterpret_cast<const T*>(shared + b.layout.values(buffer));
  const T* probabilities = reinterpret_cast<const T*>(shared + b.layout.probabilities());
  const auto* state = reinterpret_cast<const float*>(shared + b.layout.row_state());
#pragma unroll
  for (int n = 0; n < kMaxTasks; ++n) {
    int row0, value0;
    if (!b.layout.output_tile(n, row0, value0)) break;
    const float low = state[3 * (row0 + lane / 4) + 2], high = state[3 * (row0 + lane / 4 + 8) + 2];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[n][j][0] *= low, out[n][j][1] *= low, out[n][j][2] *= high, out[n][j][3] *= high;
    const T* p = a_tile_row(probabilities, TileLayout::kProbabilityRow, row0, 0);
    // The values' rows are the slots, transposed: matrices (slots 0-7, values 0-7), (8-15, 0-7), (0-7, 8-15),
    // (8-15, 8-15) give b0 and b1 of values 0-7, then of values 8-15.
    const T* v = a_tile_row(values, row, 0, value0);
#pragma unroll
    for (int k0 = 0; k0 < kChunk; k0 += 16) {
      uint32_t fragment[4];
      load_matrices<false>(fragment, p + k0);
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        uint32_t b[4];
        load_matrices<true>(b, v + k0 * row + 8 * j);
        mma_m16n8k16<T>(out[n][j], fragment, b[0], b[1]);
        mma_m16n8k16<T>(out[n][j + 1], fragment, b[2], b[3]);
      }
    }
  }
}

// The block's split: its running maxima and sums, and its unnormalized outputs, into the scratch; or where the
// split is the only one, the outputs themselves (`sinks` in the denominator).
template <typename T, int kHeadDim>
__device__ void write_split(const TileBlock<T, kHeadDim>& b, const TiledScratch& scratch, unsigned char* shared,
                            const float (&out)[kMaxTasks][8][4]) {
  const int lane = threadIdx.x % 32;
  const auto& a = b.a;
  const int64_t scratch_row = ((b.batch * a.kv_heads + b.kv_head) * scratch.splits + b.split) * b.rows;
  auto* state = reinterpret_cast<float*>(shared + b.layout.row_state());
  for (int r = threadIdx.x; r < b.rows; r += blockDim.x) {
    const float maximum = state[3 * r], sum = state[3 * r + 1];
    if (scratch.splits > 1) {
      scratch.statistics[(scratch_row + r) * 2] = maximum, scratch.statistics[(scratch_row + r) * 2 + 1] = sum;
      continue;
    }
    const float* sink = a.sinks != nullptr ? &a.sinks[b.kv_head * b.group + r % b.group] : nullptr;
    const float overall = sink != nullptr ? fmaxf(maximum, *sink) : maximum;
    const float weight = maximum == -INFINITY ? 0.0f : __expf(maximum - overall);
    const float denominator = weight * sum + (sink != nullptr ? __expf(*sink - overall) : 0.0f);
    state[3 * r + 2] = denominator > 0 ? weight / denominator : 0.0f;  // the row's outputs' factor
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < kMaxTasks; ++n) {
    int row0, value0;
    if (!b.layout.output_tile(n, row0, value0)) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + lane / 4 + 8 * half;
      if (r >= b.rows) continue;
      const int column = value0 + lane % 4 * 2;
      if (scratch.splits > 1) {
        float* to = scratch.partial + (scratch_row + r) * kHeadDim + column;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          *reinterpret_cast<float2*>(to + 8 * j) = make_float2(out[n][j][2 * half], out[n][j][2 * half + 1]);
        }
        continue;
      }
      const float factor = state[3 * r + 2];
      const int head = b.kv_head * b.group + r % b.group;
      T* to = a.out + ((b.batch * a.tokens + r / b.group) * a.heads + head) * kHeadDim + column;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        to[8 * j] = static_cast<T>(out[n][j][2 * half] * factor);
        to[8 * j + 1] = static_cast<T>(out[n][j][2 * half + 1] * factor);
      }
    }
  }
}

// The block walks its split's chunks (split, split + splits, ... from the first slot any query sees), loading the
// next chunk while it multiplies this one.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kMaxWarps * 32) tiled_cached_attention_kernel(CachedAttentionArguments<T> a,
                                                                              TiledScratch scratch) {
  extern __shared__ __align__(16) unsigned char shared[];
  const TileBlock<T, kHeadDim> b(a, scratch.splits);
  const int64_t first_slot = a.window > 0 && b.start - a.window + 1 > 0 ? b.start - a.window + 1 : 0;
  const int64_t first_chunk = first_slot / kChunk + b.split;
  begin_block(b, first_chunk * kChunk <= b.end, shared);
  if (first_chunk * kChunk <= b.end) load_chunk(b, first_chunk * kChunk, 0, shared);  // one group with the queries
  float out[kMaxTasks][8][4] = {};
  int buffer = 0;
  for (int64_t chunk = first_chunk; chunk * kChunk <= b.end; chunk += scratch.splits, buffer ^= 1) {
    if ((chunk + scratch.splits) * kChunk <= b.end) {
      load_chunk(b, (chunk + scratch.splits) * kChunk, buffer ^ 1, shared);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();
    score_chunk(b, chunk * kChunk, buffer, shared);
    __syncthreads();
    softmax_chunk(b, shared);
    __syncthreads();
    accumulate_chunk(b, buffer, shared, out);
    __syncthreads();  // the buffer is free for the chunk after next
  }
  __syncthreads();  // the rows' state, where no chunk was this block's
  write_split(b, scratch, shared, out);
}

// One block per output row (row of the batch, token, head), kHeadDim / 4 threads of 4 values: the splits' outputs
// weighed by their maxima against the overall one; `sinks` join the denominator.
template <typename T, int kHeadDim>
__global__ void combine_splits_kernel(CachedAttentionArguments<T> a, TiledScratch scratch) {
  const int head = static_cast<int>(blockIdx.x % a.heads);
  const int64_t token_row = blockIdx.x / a.heads;  // batch * tokens + token
  const int group = a.heads / a.kv_heads, rows = group * a.tokens;
  const int64_t batch = token_row / a.tokens;
  const int r = static_cast<int>(token_row % a.tokens) * group + head % group;
  const int64_t first_split = (batch * a.kv_heads + head / group) * scratch.splits;
  const float* statistics = scratch.statistics + (first_split * rows + r) * 2;
  float overall = a.sinks != nullptr ? a.sinks[head] : -INFINITY;
  for (int s = 0; s < scratch.splits; ++s) overall = fmaxf(overall, statistics[2 * s * rows]);
  float denominator = a.sinks != nullptr ? __expf(a.sinks[head] - overall) : 0.0f, numerator[4] = {};
  for (int s = 0; s < scratch.splits; ++s) {
    const float maximum = statistics[2 * s * rows];
    if (maximum == -INFINITY) continue;  // nothing seen (zeros): its weight would be exp(-inf - -inf), NaN
    const float weight = __expf(maximum - overall);
    denominator += weight * statistics[2 * s * rows + 1];
    const float* split_row = scratch.partial + ((first_split + s) * rows + r) * kHeadDim;
    const float4 part = reinterpret_cast<const float4*>(split_row)[threadIdx.x];
    numerator[0] += weight * part.x, numerator[1] += weight * part.y;
    numerator[2] += weight * part.z, numerator[3] += weight * part.w;
  }
  T* to = a.out + (token_row * a.heads + head) * kHeadDim + 4 * threadIdx.x;
  for (int i = 0; i < 4; ++i) to[i] = static_cast<T>(denominator > 0 ? numerator[i] / denominator : 0.0f);
}

int64_t rows_padded(int64_t heads, int64_t kv_heads, int64_t tokens) { return (heads / kv_heads * tokens + 15) / 16 * 16; }

// A warp per 16 queries x 16 slots of a chunk's scores, at most kMaxWarps.
int block_warps(int64_t padded) { return static_cast<int>(std::min<int64_t>(kMaxWarps, padded / 16 * (kChunk / 16))); }

template <typename T, int kHeadDim>
void launch(const CachedAttentionArguments<T>& a, int64_t batch, const TiledScratch& scratch, cudaStream_t stream) {
  const int64_t padded = rows_padded(a.heads, a.kv_heads, a.tokens);
  const auto bytes = static_cast<int>(TileLayout{kHeadDim, static_cast<int>(padded)}.bytes());
  auto kernel = tiled_cached_attention_kernel<T, kHeadDim>;
  const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  TORCH_CHECK(set == cudaSuccess, "cached_attention: the tiled kernel's ", bytes, " bytes of shared memory: ",
              cudaGetErrorString(set));
  const auto blocks = static_cast<unsigned>(batch * a.kv_heads * scratch.splits);
  kernel<<<blocks, 32 * block_warps(padded), bytes, stream>>>(a, scratch);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (scratch.splits == 1) return;  // the kernel wrote the outputs
  const auto rows = static_cast<unsigned>(batch * a.tokens * a.heads);
  combine_splits_kernel<T, kHeadDim><<<rows, kHeadDim / 4, 0, stream>>>(a, scratch);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the kernel was compiled for tensor cores' mma.sync and cp.async (PTX of compute capability 8.0 or later):
// code for an older one, run on a newer device by the driver's JIT, would stop at __trap.
bool compiled_for_tensor_cores() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, tiled_cached_attention_kernel<c10::BFloat16, 128>) == cudaSuccess &&
         attributes.ptxVersion >= 80;
}

}  // namespace

bool tiled_cached_attention_takes(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t tokens) {
  if (kv_heads < 1 || heads % kv_heads != 0 || tokens < 1 || tokens > kCachedAttentionMaxTokens) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  static const bool compiled = compiled_for_tensor_cores();
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  if (!compiled || device->major < 8) return false;
  const int64_t padded = rows_padded(heads, kv_heads, tokens);
  // Each warp holds at most kMaxTasks output tiles.
  if (padded / 16 * (head_dim / 64) > int64_t{kMaxTasks} * block_warps(padded)) return false;
  return TileLayout{static_cast<int>(head_dim), static_cast<int>(padded)}.bytes() <= device->sharedMemPerBlockOptin;
}

int tiled_cached_attention_splits(int64_t batch, int64_t kv_heads, int64_t visible) {
  // About a block per multiprocessor (a block's shared memory is most of one's): at 16 rows of 4 kv heads 2 splits
  // gave the decode step 4.13-4.19 ms, 1 split 4.18-4.19 and 3 4.29-4.34; at 8 rows (3 splits by this rule, 3.57-3.62)
  // 2 splits gave 3.50-3.54, two runs each, not enough to make a rule of (bench/results/streams_h200_2026-11-30c.md).
  const int64_t chunks = (visible + kChunk - 1) / kChunk;
  const int64_t splits = at::cuda::getCurrentDeviceProperties()->multiProcessorCount / (batch * kv_heads);
  return static_cast<int>(std::clamp<int64_t>(splits, 1, chunks));
}

template <typename T>
void launch_tiled_cached_attention(const CachedAttentionArguments<T>& a, int64_t head_dim, int64_t batch,
                                   const TiledScratch& scratch, cudaStream_t stream) {
  if (head_dim == 64) return launch<T, 64>(a, batch, scratch, stream);
  if (head_dim == 128) return launch<T, 128>(a, batch, scratch, stream);
  launch<T, 256>(a, batch, scratch, stream);
}

template void launch_tiled_cached_attention(const CachedAttentionArguments<c10::BFloat16>&, int64_t, int64_t,
                                            const TiledScratch&, cudaStream_t);
template void launch_tiled_cached_attention(const CachedAttentionArguments<c10::Half>&, int64_t, int64_t,
                                            const TiledScratch&, cudaStream_t);

}  // namespace probekit::model::fused
