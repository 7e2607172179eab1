// The kernels of model/fused_ops.h. Each works on rows (a token's hidden vector, or one attention head of one
// token) with one thread block per row, accumulating in fp32.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <type_traits>

#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

constexpr int kThreads = 256;
// Below this many tokens a pass is a decode step's: the kernels spread each token over more threads.
constexpr int64_t kFewTokens = 256;

template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

template <typename T>
__device__ __forceinline__ void store(T* p, int64_t i, float v) {
  p[i] = static_cast<T>(v);
}

// Sum of `value` over the block; every thread gets the result.
__device__ float block_sum(float value) {
  __shared__ float partial[32];
  __shared__ float total;
  __syncthreads();  // every thread has read the previous call's total before it is overwritten
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffff, value, offset);
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffff, value, offset);
    if (lane == 0) total = value;
  }
  __syncthreads();
  return total;
}

template <typename In, typename Out>
__global__ void rms_norm_kernel(const In* x, const float* weight, Out* out, int64_t width, float eps) {
  int64_t row = blockIdx.x;
  const In* in = x + row * width;
  float squares = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = load(in, i);
    squares += v * v;
  }
  float scale = rsqrtf(block_sum(squares) / static_cast<float>(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) store(out + row * width, i, load(in, i) * scale * weight[i]);
}

// residual_add's kernels' arguments: the fp32 residual, one or two branches (second_branch null: one), each
// RMS-normalized with its weight first when that is not null, the sum's output (null: not written, for the
// register kernel) and its normalized copy's (null with norm_weight).
template <typename Branch, typename Out>
struct ResidualAddArguments {
  const float* residual;
  const Branch* branch;
  const float* branch_weight;
  const Branch* second_branch;
  const float* second_weight;
  const float* norm_weight;
  float* sum;
  Out* normed;
  int64_t width;
  float eps;
};

// new = residual + (branch_weight ? rms(branch) * branch_weight : branch); normed = rms(new) * norm_weight.
template <typename Branch, typename Out>
__global__ void residual_add_kernel(ResidualAddArguments<Branch, Out> a) {
  const int64_t row = blockIdx.x, width = a.width;
  const float* r = a.residual + row * width;
  const Branch* b = a.branch + row * width;
  float branch_scale = 1.0f;
  if (a.branch_weight != nullptr) {
    float squares = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      float v = load(b, i);
      squares += v * v;
    }
    branch_scale = rsqrtf(block_sum(squares) / static_cast<float>(width) + a.eps);
  }
  float squares = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = load(b, i);
    if (a.branch_weight != nullptr) v = v * branch_scale * a.branch_weight[i];
    float sum = r[i] + v;
    a.sum[row * width + i] = sum;
    squares += sum * sum;
  }
  if (a.norm_weight == nullptr) return;
  float scale = rsqrtf(block_sum(squares) / static_cast<float>(width) + a.eps);
  // Each thread reads back only the sums it wrote itself.
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    store(a.normed + row * width, i, a.sum[row * width + i] * scale * a.norm_weight[i]);
  }
}

// Four consecutive values, loaded and stored as one vector access.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// The register kernels' row: this thread's quads of `row` (quads t, t + blockDim.x, ...) into v in fp32; returns
// the sum of their squares.
template <typename T, int kQuads>
__device__ __forceinline__ float load_quads(const T* row, float (&v)[kQuads][4], int quads) {
  const auto* in = reinterpret_cast<const Quad<T>*>(row);
  float squares = 0;
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    const Quad<T> loaded = in[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[q][j] = static_cast<float>(loaded.v[j]);
      squares += v[q][j] * v[q][j];
    }
  }
  return squares;
}

// The end of the register kernels' RMS norm: a row's quads v (this thread's), whose squares it summed, written
// normalized and scaled by `weight` into out_row. One function for both kernels keeps their arithmetic the same.
template <typename Out, int kQuads>
__device__ __forceinline__ void store_normalized(const float (&v)[kQuads][4], float squares, const float* weight,
                                                 Out* out_row, int64_t width, float eps) {
  const float scale = rsqrtf(block_sum(squares) / static_cast<float>(width) + eps);
  const int quads = static_cast<int>(width / 4);
  auto* normed = reinterpret_cast<Quad<Out>*>(out_row);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    const float4 w = reinterpret_cast<const float4*>(weight)[i];
    Quad<Out> result;
    result.v[0] = static_cast<Out>(v[q][0] * scale * w.x);
    result.v[1] = static_cast<Out>(v[q][1] * scale * w.y);
    result.v[2] = static_cast<Out>(v[q][2] * scale * w.z);
    result.v[3] = static_cast<Out>(v[q][3] * scale * w.w);
    normed[i] = result;
  }
}

// Adds a branch's quads v (this thread's, whose squares it summed) into `sum` (this thread's quads of the
// running residual), the branch RMS-normalized with `weight` first when that is not null.
template <int kQuads>
__device__ __forceinline__ void add_quads(float (&sum)[kQuads][4], const float (&v)[kQuads][4], float squares,
                                          const float* weight, int64_t width, float eps) {
  const float scale = weight != nullptr ? rsqrtf(block_sum(squares) / static_cast<float>(width) + eps) : 1.0f;
  const int quads = static_cast<int>(width / 4);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    const float4 w = weight != nullptr ? reinterpret_cast<const float4*>(weight)[i] : float4{1, 1, 1, 1};
    sum[q][0] = sum[q][0] + v[q][0] * scale * w.x;
    sum[q][1] = sum[q][1] + v[q][1] * scale * w.y;
    sum[q][2] = sum[q][2] + v[q][2] * scale * w.z;
    sum[q][3] = sum[q][3] + v[q][3] * scale * w.w;
  }
}

// The same as residual_add_kernel with the row held in registers: thread t holds the quads t, t + blockDim.x,
// ... (kQuads of them), loaded once with vector accesses and never read back from memory. 1.74x the kernel
// above, which rereads the branch and its own sums (4.1 against 2.3 TB/s on an H200 at width 2560). A second
// branch is added to the first's sum in registers, as a second call would add it to the sum read back.
template <typename Branch, typename Out, int kQuads>
__global__ void residual_add_quads_kernel(ResidualAddArguments<Branch, Out> a) {
  const int64_t row = blockIdx.x;
  const int quads = static_cast<int>(a.width / 4);
  float sum[kQuads][4], v[kQuads][4];
  const float branch_squares = load_quads(a.branch + row * a.width, v, quads);
  load_quads(a.residual + row * a.width, sum, quads);
  add_quads(sum, v, branch_squares, a.branch_weight, a.width, a.eps);
  if (a.second_branch != nullptr) {
    const float second_squares = load_quads(a.second_branch + row * a.width, v, quads);
    add_quads(sum, v, second_squares, a.second_weight, a.width, a.eps);
  }
  float squares = 0;
  auto* sums = reinterpret_cast<float4*>(a.sum + row * a.width);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    if (a.sum != nullptr) sums[i] = float4{sum[q][0], sum[q][1], sum[q][2], sum[q][3]};
#pragma unroll
    for (int j = 0; j < 4; ++j) squares += sum[q][j] * sum[q][j];
  }
  if (a.norm_weight == nullptr) return;
  store_normalized(sum, squares, a.norm_weight, a.normed + row * a.width, a.width, a.eps);
}

// rms_norm of a row held in registers as residual_add_quads_kernel holds it: the same squares summed in the
// same order (see launch_by_quads).
template <typename In, typename Out, int kQuads>
__global__ void rms_norm_quads_kernel(const In* x, const float* weight, Out* out, int64_t width, float eps) {
  const int64_t row = blockIdx.x;
  const int quads = static_cast<int>(width / 4);
  float v[kQuads][4];
  const float squares = load_quads(x + row * width, v, quads);
  store_normalized(v, squares, weight, out + row * width, width, eps);
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_exact(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float activate(float x, int activation) {
  return activation == 0 ? silu(x) : activation == 1 ? gelu_tanh(x) : gelu_exact(x);
}

// act(gate) * up; code 3 is gpt-oss's clamped SwiGLU, whose up is clamped and shifted too (model/activation.h).
__device__ __forceinline__ float gated(float gate, float up, int activation, float limit) {
  if (activation != 3) return activate(gate, activation) * up;
  gate = fminf(gate, limit);
  up = fminf(fmaxf(up, -limit), limit);
  return (up + 1.0f) * (gate / (1.0f + expf(-kClampedSwigluAlpha * gate)));
}

// What the gated kernels apply: the activation's code (gated()), the clamped SwiGLU's limit, and, when `bias` is
// set, a bias [experts, 2 * inner] added to each row's gate and up by the row's expert (routed experts' biases).
template <typename T>
struct GatedActivation {
  int code = 0;
  float limit = 0;
  const T* bias = nullptr;
  const int64_t* row_experts = nullptr;
};

// value + offset rounded to T, as an addition in T rounds before the activation reads it.
template <typename T>
__device__ __forceinline__ float plus_rounded(T value, T offset) {
  return static_cast<float>(static_cast<T>(static_cast<float>(value) + static_cast<float>(offset)));
}

template <typename T>
__global__ void gated_activation_kernel(const T* gate_up, T* out, int64_t inner, int64_t total, GatedActivation<T> a) {
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t row = index / inner, column = index % inner;
    const T* in = gate_up + row * 2 * inner;
    const T* bias = a.bias != nullptr ? a.bias + a.row_experts[row] * 2 * inner : nullptr;
    const float gate = bias != nullptr ? plus_rounded(in[column], bias[column]) : load(in, column);
    const float up = bias != nullptr ? plus_rounded(in[inner + column], bias[inner + column]) : load(in, inner + column);
    store(out, index, gated(gate, up, a.code, a.limit));
  }
}

// kCount values, loaded and stored as one vector access.
template <typename T, int kCount>
struct alignas(kCount * sizeof(T)) LaneValues {
  T v[kCount];
};

// 16 bytes of values.
template <typename T>
using Pack = LaneValues<T, 16 / sizeof(T)>;

// 16-byte vector accesses (needs inner a multiple of the pack and aligned rows), each block on kThreads packs of
// one row: no index division per element, which made the element-wise kernel above four times slower than memory
// allows, and every row spread over several blocks, so that a decode step's dozen rows keep many multiprocessors
// busy (a block per row looped over the row on 13 of them: 5.2 us where 1.6 MB should take 2).
template <typename T>
__global__ void gated_activation_rows_kernel(const T* gate_up, T* out, int64_t inner, int64_t blocks_per_row,
                                             GatedActivation<T> a) {
  constexpr int kWidth = 16 / sizeof(T);
  const int64_t row = blockIdx.x / blocks_per_row, packs = inner / kWidth;
  const int64_t i = (blockIdx.x % blocks_per_row) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  const auto* gate = reinterpret_cast<const Pack<T>*>(gate_up + row * 2 * inner);
  const auto* up = reinterpret_cast<const Pack<T>*>(gate_up + row * 2 * inner + inner);
  auto* result = reinterpret_cast<Pack<T>*>(out + row * inner);
  Pack<T> g = gate[i], u = up[i], r;
  Pack<T> gate_bias{}, up_bias{};
  if (a.bias != nullptr) {
    const T* bias = a.bias + a.row_experts[row] * 2 * inner;
    gate_bias = reinterpret_cast<const Pack<T>*>(bias)[i];
    up_bias = reinterpret_cast<const Pack<T>*>(bias + inner)[i];
  }
#pragma unroll
  for (int j = 0; j < kWidth; ++j) {
    const float gate_value = a.bias != nullptr ? plus_rounded(g.v[j], gate_bias.v[j]) : static_cast<float>(g.v[j]);
    const float up_value = a.bias != nullptr ? plus_rounded(u.v[j], up_bias.v[j]) : static_cast<float>(u.v[j]);
    r.v[j] = static_cast<T>(gated(gate_value, up_value, a.code, a.limit));
  }
  result[i] = r;
}

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

bool quad_aligned(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the register kernels take rows of `width`: whole quads, at most 16 a thread in blocks of 512 threads.
bool fits_quads(int64_t width) { return width % 4 == 0 && width / 4 <= 16 * 512; }

// Calls launch(std::integral_constant<int, kQuads>, threads) for the register kernels' layout of a row of
// `width` (2, 4, 8 or 16 quads a thread, blocks of at most 512 threads: widths up to 32,768); false when the
// width does not fit it. residual_add and rms_norm share it, so that a norm of the same fp32 row sums its
// squares in the same order in either: a model split over devices normalizes at its stage boundary in rms_norm
// what one device normalizes inside residual_add, and gets the same bits.
template <typename Launch>
bool launch_by_quads(int64_t width, Launch&& launch) {
  const int64_t quads = width / 4;
  auto with = [&](auto quads_per_thread) {
    constexpr int kQuads = decltype(quads_per_thread)::value;
    launch(quads_per_thread, static_cast<int>((quads + kQuads - 1) / kQuads + 31) / 32 * 32);
    return true;
  };
  if (!fits_quads(width)) return false;
  if (quads <= 2 * 512) return with(std::integral_constant<int, 2>{});
  if (quads <= 4 * 512) return with(std::integral_constant<int, 4>{});
  if (quads <= 8 * 512) return with(std::integral_constant<int, 8>{});
  return with(std::integral_constant<int, 16>{});
}

// The register kernel (`in_registers`: see residual_add), else the plain kernel.
template <typename Branch, typename Out>
void launch_residual_add(const ResidualAddArguments<Branch, Out>& a, int64_t rows, bool in_registers,
                         cudaStream_t stream) {
  if (in_registers) {
    launch_by_quads(a.width, [&](auto quads_per_thread, int threads) {
      constexpr int kQuads = decltype(quads_per_thread)::value;
      residual_add_quads_kernel<Branch, Out, kQuads><<<rows, threads, 0, stream>>>(a);
    });
    return;
  }
  residual_add_kernel<Branch, Out><<<rows, kThreads, 0, stream>>>(a);
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

// cached_attention_kernel's arguments: the pass's queries [B, T, heads, D] (token-major), keys and values
// [B, kv_heads, T, D] (views with their strides), the cache [B, kv_heads, capacity, D] and each token's position
// [B, T] (consecutive within a row).
template <typename T>
struct CachedAttentionArguments {
  const T* queries;
  const T* keys;
  const T* values;
  int64_t k_batch, k_head, k_token, v_batch, v_head, v_token;
  T* cache_keys;
  T* cache_values;
  const int64_t* positions;
  const float* sinks;  // [heads] or null
  T* out;
  int heads, kv_heads, tokens;
  int64_t capacity, visible, window;
  float scale;
};

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
  const Lanes q_lanes = reinterpret_cast<const Lanes*>(a.queries + ((batch * a.tokens + token) * a.heads + head) * kHeadDim)[lane];
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

int blocks_for(int64_t total) { return static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535 * 8)); }

template <typename F>
void dispatch_float_type(at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat: f(float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    case at::kHalf: f(c10::Half{}); break;
    default: TORCH_CHECK(false, "fused kernels: unsupported dtype ", type);
  }
}

const float* optional_data(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& weight, double eps, at::ScalarType output) {
  c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  int64_t width = x.size(-1), rows = x.numel() / width;
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(output));
  if (rows == 0) return out;
  auto stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(x.scalar_type(), [&](auto in_type) {
    using In = decltype(in_type);
    dispatch_float_type(output, [&](auto out_type) {
      using Out = decltype(out_type);
      const bool aligned = quad_aligned(x.data_ptr()) && quad_aligned(weight.data_ptr()) && quad_aligned(out.data_ptr());
      if (aligned && launch_by_quads(width, [&](auto quads_per_thread, int threads) {
            constexpr int kQuads = decltype(quads_per_thread)::value;
            rms_norm_quads_kernel<In, Out, kQuads><<<rows, threads, 0, stream>>>(
                x.data_ptr<In>(), weight.data_ptr<float>(), out.data_ptr<Out>(), width, static_cast<float>(eps));
          })) {
        return;
      }
      rms_norm_kernel<In, Out><<<rows, kThreads, 0, stream>>>(x.data_ptr<In>(), weight.data_ptr<float>(),
                                                                out.data_ptr<Out>(), width, static_cast<float>(eps));
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::pair<at::Tensor, at::Tensor> residual_add(const at::Tensor& residual_in, const std::vector<ResidualBranch>& branches,
                                               const at::Tensor& norm_weight, double eps, at::ScalarType output,
                                               bool sum_wanted) {
  TORCH_CHECK(branches.size() == 1 || branches.size() == 2, "residual_add: one or two branches, not ", branches.size());
  c10::cuda::CUDAGuard guard(residual_in.device());
  at::Tensor residual = residual_in.contiguous(), first = branches[0].values.contiguous();
  at::Tensor second = branches.size() == 2 ? branches[1].values.contiguous() : at::Tensor();
  TORCH_CHECK(residual.scalar_type() == at::kFloat, "residual_add: the residual stream must be fp32");
  const int64_t width = residual.size(-1), rows = residual.numel() / width;
  // The register kernel needs every row on a 16-byte boundary and a width it fits; it adds two branches in one
  // pass when they share a dtype. Otherwise the first sum is written and read back.
  const bool in_registers = fits_quads(width) && quad_aligned(residual.data_ptr()) &&
                            quad_aligned(first.data_ptr()) && quad_aligned(optional_data(branches[0].norm_weight)) &&
                            quad_aligned(optional_data(norm_weight)) &&
                            (!second.defined() || (second.scalar_type() == first.scalar_type() &&
                                                   quad_aligned(second.data_ptr()) &&
                                                   quad_aligned(optional_data(branches[1].norm_weight))));
  if (second.defined() && !in_registers) {
    const at::Tensor middle = residual_add(residual, {branches[0]}, at::Tensor(), eps, output, true).first;
    return residual_add(middle, {branches[1]}, norm_weight, eps, output, sum_wanted);
  }
  at::Tensor sum = sum_wanted || !in_registers ? at::empty_like(residual) : at::Tensor();
  at::Tensor normed = norm_weight.defined() ? at::empty(residual.sizes(), residual.options().dtype(output)) : at::Tensor();
  if (rows == 0) return {sum, normed};
  auto stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(first.scalar_type(), [&](auto branch_type) {
    using Branch = decltype(branch_type);
    dispatch_float_type(output, [&](auto out_type) {
      using Out = decltype(out_type);
      const ResidualAddArguments<Branch, Out> arguments{
          residual.data_ptr<float>(),
          first.data_ptr<Branch>(),
          optional_data(branches[0].norm_weight),
          second.defined() ? second.data_ptr<Branch>() : nullptr,
          second.defined() ? optional_data(branches[1].norm_weight) : nullptr,
          optional_data(norm_weight),
          sum.defined() ? sum.data_ptr<float>() : nullptr,
          normed.defined() ? normed.data_ptr<Out>() : nullptr,
          width,
          static_cast<float>(eps)};
      launch_residual_add(arguments, rows, in_registers, stream);
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {sum, normed};
}

at::Tensor gated_activation(const at::Tensor& gate_up_in, Activation activation, double limit, const at::Tensor& bias_in,
                            const at::Tensor& row_experts_in) {
  c10::cuda::CUDAGuard guard(gate_up_in.device());
  at::Tensor gate_up = gate_up_in.contiguous();
  at::Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  at::Tensor row_experts = row_experts_in.defined() ? row_experts_in.to(at::kLong).contiguous() : row_experts_in;
  TORCH_CHECK(activation != Activation::kClampedSwiglu || limit > 0, "gated_activation: the clamped SwiGLU needs its "
              "limit, got ", limit);
  TORCH_CHECK(!bias.defined() || (row_experts.defined() && row_experts.numel() * gate_up.size(-1) == gate_up.numel()),
              "gated_activation: expert biases need one expert a row");
  if (bias.defined() && (bias.scalar_type() != gate_up.scalar_type() || !quad_aligned(bias.data_ptr()))) {
    gate_up = gate_up + bias.index_select(0, row_experts);
    bias = at::Tensor();
  }
  int64_t inner = gate_up.size(-1) / 2;
  std::vector<int64_t> shape(gate_up.sizes().begin(), gate_up.sizes().end());
  shape.back() = inner;
  at::Tensor out = at::empty(shape, gate_up.options());
  int64_t total = out.numel();
  if (total == 0) return out;
  const int code = activation == Activation::kSilu       ? 0
                   : activation == Activation::kGeluTanh ? 1
                   : activation == Activation::kGeluExact ? 2
                                                          : 3;
  const auto float_limit = static_cast<float>(limit);
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t pack_bytes = 16, rows = total / inner;
  const int64_t blocks_per_row = (inner * gate_up.element_size() / pack_bytes + kThreads - 1) / kThreads;
  const bool packed = (inner * gate_up.element_size()) % pack_bytes == 0 &&
                      reinterpret_cast<uintptr_t>(gate_up.data_ptr()) % pack_bytes == 0 && rows * blocks_per_row <= INT32_MAX;
  dispatch_float_type(gate_up.scalar_type(), [&](auto type) {
    using T = decltype(type);
    const GatedActivation<T> a{code, float_limit, bias.defined() ? bias.data_ptr<T>() : nullptr,
                               bias.defined() ? row_experts.data_ptr<int64_t>() : nullptr};
    if (packed) {
      gated_activation_rows_kernel<T><<<rows * blocks_per_row, kThreads, 0, stream>>>(gate_up.data_ptr<T>(), out.data_ptr<T>(),
                                                                                      inner, blocks_per_row, a);
    } else {
      gated_activation_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(gate_up.data_ptr<T>(), out.data_ptr<T>(),
                                                                             inner, total, a);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

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
  for (const at::Tensor* t : {&k, &v, &cache_keys, &cache_values}) {
    if (t->scalar_type() != q.scalar_type() || t->size(-1) != head_dim || t->stride(-1) != 1) return false;
    // Each lane moves its elements as one vector access: rows and their starts on 16-byte boundaries.
    for (int64_t d = 0; d < 3; ++d) {
      if (t->stride(d) % 8 != 0) return false;
    }
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
  }
  return cache_keys.is_contiguous() && cache_values.is_contiguous();
}

at::Tensor cached_attention(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v, at::Tensor& cache_keys,
                            at::Tensor& cache_values, const at::Tensor& positions_in, int64_t visible, int64_t window,
                            double scale, const at::Tensor& sinks_in) {
  c10::cuda::CUDAGuard guard(q_in.device());
  const int64_t batch = q_in.size(0), heads = q_in.size(1), tokens = q_in.size(2), head_dim = q_in.size(3);
  const int64_t kv_heads = k.size(1), capacity = cache_keys.size(2);
  TORCH_CHECK(cached_attention_serves(q_in, k, v, cache_keys, cache_values), "cached_attention: unsupported inputs");
  at::Tensor queries = q_in.transpose(1, 2).contiguous();  // token-major [B, T, heads, D]: the kernel's rows
  at::Tensor positions = positions_in.to(at::kLong).contiguous();
  at::Tensor sinks = sinks_in.defined() ? sinks_in.to(q_in.device(), at::kFloat).contiguous() : at::Tensor();
  at::Tensor out = at::empty_like(queries);
  auto stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(q_in.scalar_type(), [&](auto type) {
    using T = decltype(type);
    if constexpr (sizeof(T) == 2) {
      const CachedAttentionArguments<T> arguments{
          queries.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), k.stride(0), k.stride(1), k.stride(2), v.stride(0),
          v.stride(1), v.stride(2), cache_keys.data_ptr<T>(), cache_values.data_ptr<T>(), positions.data_ptr<int64_t>(),
          optional_data(sinks), out.data_ptr<T>(), static_cast<int>(heads), static_cast<int>(kv_heads),
          static_cast<int>(tokens), capacity, visible, window, static_cast<float>(scale)};
      // 16 warps walking 4 slots at a time: the quickest of the shapes timed at a decode step's 13 tokens
      // (bench/results/chat_server_h200_2026-11-26d.md).
      constexpr int kWarps = 16, kAtOnce = 4;
      auto kernel = head_dim == 64    ? cached_attention_kernel<T, 2, kWarps, kAtOnce>
                    : head_dim == 128 ? cached_attention_kernel<T, 4, kWarps, kAtOnce>
                                      : cached_attention_kernel<T, 8, kWarps, kAtOnce>;
      kernel<<<batch * heads * tokens, 32 * kWarps, 0, stream>>>(arguments);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out.transpose(1, 2);
}

}  // namespace probekit::model::fused
