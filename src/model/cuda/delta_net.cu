// fused::delta_net_heads: a Gated DeltaNet layer's mixer after its input projection in one kernel, one thread block
// per (sequence, value head). The ATen arithmetic of model/gated_delta_net.cpp (the reference it is tested against)
// runs the delta rule in chunks of fp32 products and some forty element-wise passes over memory; here the state
// S [dk, dv] stays in registers for the whole sequence and each token updates it once, as the recurrence is written:
// on a GPU the sequential steps cost less than the passes they replace.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// Threads sharing one column of a head's state, each holding a quarter of its rows.
constexpr int kParts = 4;
// Tokens staged in shared memory at a time: their q, k, v (then outputs), g and beta.
constexpr int kChunkTokens = 32;
constexpr int kWarp = 32;

template <typename T>
struct DeltaNetArguments {
  const T* projected;          // [N, row_stride]: each token's q k v (the convolution's channels), z, b, a
  int64_t row_stride;
  const int64_t* starts;       // [sequences + 1]: sequence s is rows [starts[s], starts[s + 1])
  const float* conv_weight;    // [channels, conv_kernel]
  const T* conv_before;        // [sequences, channels, conv_kernel - 1], or null: zeros before each sequence
  const float* A_log;          // [value_heads]
  const float* dt_bias;        // [value_heads]
  const float* norm_weight;    // [value_head_dim]
  const float* initial;        // [sequences, value_heads, dk, dv], or null: zeros
  const int64_t* commit;       // [sequences], or null: the state after every token
  float* state_out;            // [sequences, value_heads, dk, dv], or null
  T* out;                      // [N, value_heads * dv]
  int key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel;
  float eps;
};

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
  return value;
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// ATen's softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The causal convolution's output (after silu) at `channel` of the sequence's token `position` (row `row`).
template <typename T>
__device__ float convolved(const DeltaNetArguments<T>& a, int64_t row, int64_t position, int sequence, int channel) {
  const int history = a.conv_kernel - 1;
  const int channels = 2 * a.key_heads * a.key_head_dim + a.value_heads * a.value_head_dim;
  float sum = 0;
  for (int tap = 0; tap < a.conv_kernel; ++tap) {
    const int64_t back = history - tap;  // how many tokens before `position` this tap reads
    float x = 0;
    if (position >= back) {
      x = static_cast<float>(a.projected[(row - back) * a.row_stride + channel]);
    } else if (a.conv_before != nullptr) {
      x = static_cast<float>(a.conv_before[(static_cast<int64_t>(sequence) * channels + channel) * history +
                                           history + position - back]);
    }
    sum += a.conv_weight[channel * a.conv_kernel + tap] * x;
  }
  return silu(sum);
}

// Stages tokens [first, first + count) of the sequence: q and k l2-normalized (q also scaled by dk^-0.5) and zero
// past dk, v zero past dv, g and beta; one warp per token.
template <typename T, int kKeyDim>
__device__ void stage_chunk(const DeltaNetArguments<T>& a, int sequence, int head, int64_t start, int64_t first,
                            int count, float* q_s, float* k_s, float* v_s, float* g_s, float* beta_s, int v_width) {
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int key_head = head / (a.value_heads / a.key_heads), dk = a.key_head_dim, dv = a.value_head_dim;
  const int key_dim = a.key_heads * dk, channels = 2 * key_dim + a.value_heads * dv;
  for (int u = threadIdx.x / kWarp; u < count; u += warps) {
    const int64_t position = first + u, row = start + position;
    for (int which = 0; which < 2; ++which) {  // q, then k
      float* dst = (which == 0 ? q_s : k_s) + u * kKeyDim;
      float squares = 0;
      for (int i = lane; i < kKeyDim; i += kWarp) {
        const float y = i < dk ? convolved(a, row, position, sequence, which * key_dim + key_head * dk + i) : 0.0f;
        dst[i] = y;
        squares += y * y;
      }
      const float scale = rsqrtf(warp_sum(squares) + 1e-6f) * (which == 0 ? rsqrtf(static_cast<float>(dk)) : 1.0f);
      for (int i = lane; i < kKeyDim; i += kWarp) dst[i] *= scale;
    }
    for (int j = lane; j < v_width; j += kWarp) {
      v_s[u * v_width + j] = j < dv ? convolved(a, row, position, sequence, 2 * key_dim + head * dv + j) : 0.0f;
    }
    if (lane == 0) {
      const T* tail = a.projected + row * a.row_stride + channels + a.value_heads * dv;  // b, then a
      const float decay_input = static_cast<float>(tail[a.value_heads + head]) + a.dt_bias[head];
      g_s[u] = -expf(a.A_log[head]) * softplus(decay_input);
      beta_s[u] = 1.0f / (1.0f + expf(-static_cast<float>(tail[head])));
    }
  }
}

// Writes the gated, RMS-normalized outputs of the staged tokens (v_s holds each token's S^T q): one warp per token.
template <typename T>
__device__ void write_chunk(const DeltaNetArguments<T>& a, int head, int64_t start, int64_t first, int count,
                            const float* o_s, int v_width) {
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp, dv = a.value_head_dim;
  const int channels = 2 * a.key_heads * a.key_head_dim + a.value_heads * dv;
  for (int u = threadIdx.x / kWarp; u < count; u += warps) {
    const float* o = o_s + u * v_width;
    float squares = 0;
    for (int j = lane; j < dv; j += kWarp) squares += o[j] * o[j];
    const float scale = rsqrtf(warp_sum(squares) / static_cast<float>(dv) + a.eps);
    const int64_t row = start + first + u;
    const T* z = a.projected + row * a.row_stride + channels + head * dv;
    T* out = a.out + row * a.value_heads * dv + head * dv;
    for (int j = lane; j < dv; j += kWarp) {
      out[j] = static_cast<T>(o[j] * scale * a.norm_weight[j] * silu(static_cast<float>(z[j])));
    }
  }
}

// This thread's rows of the state: float4 f holds rows (f * kParts + part) * 4 ... + 3, so that the four parts of
// a column read consecutive 16-byte words of a staged vector.
template <int kKeyDim>
struct StateRows {
  static constexpr int kQuads = kKeyDim / kParts / 4;
  float4 s[kQuads];

  __device__ static int row(int quad, int part) { return (quad * kParts + part) * 4; }

  __device__ void load(const float* state, int part, int column, int dk, int dv) {
    for (int f = 0; f < kQuads; ++f) {
      const int i = row(f, part);
      s[f].x = i + 0 < dk ? state[(i + 0) * dv + column] : 0.0f;
      s[f].y = i + 1 < dk ? state[(i + 1) * dv + column] : 0.0f;
      s[f].z = i + 2 < dk ? state[(i + 2) * dv + column] : 0.0f;
      s[f].w = i + 3 < dk ? state[(i + 3) * dv + column] : 0.0f;
    }
  }

  __device__ void store(float* state, int part, int column, int dk, int dv) const {
    for (int f = 0; f < kQuads; ++f) {
      const int i = row(f, part);
      if (i + 0 < dk) state[(i + 0) * dv + column] = s[f].x;
      if (i + 1 < dk) state[(i + 1) * dv + column] = s[f].y;
      if (i + 2 < dk) state[(i + 2) * dv + column] = s[f].z;
      if (i + 3 < dk) state[(i + 3) * dv + column] = s[f].w;
    }
  }

  // One token: S <- exp(g) S + k (beta (v - exp(g) S^T k))^T; returns S^T q (every part of the column gets it).
  __device__ float step(const float* q, const float* k, float v, float g, float beta, int part) {
    const float4* keys = reinterpret_cast<const float4*>(k);
    const float4* queries = reinterpret_cast<const float4*>(q);
    float remembered = 0;
    for (int f = 0; f < kQuads; ++f) {
      const float4 key = keys[f * kParts + part];
      remembered += s[f].x * key.x + s[f].y * key.y + s[f].z * key.z + s[f].w * key.w;
    }
    remembered += __shfl_xor_sync(0xffffffff, remembered, 1);
    remembered += __shfl_xor_sync(0xffffffff, remembered, 2);
    const float decay = expf(g), correction = beta * (v - decay * remembered);
    float read = 0;
    for (int f = 0; f < kQuads; ++f) {
      const float4 key = keys[f * kParts + part], query = queries[f * kParts + part];
      s[f].x = decay * s[f].x + key.x * correction;
      s[f].y = decay * s[f].y + key.y * correction;
      s[f].z = decay * s[f].z + key.z * correction;
      s[f].w = decay * s[f].w + key.w * correction;
      read += s[f].x * query.x + s[f].y * query.y + s[f].z * query.z + s[f].w * query.w;
    }
    read += __shfl_xor_sync(0xffffffff, read, 1);
    read += __shfl_xor_sync(0xffffffff, read, 2);
    return read;
  }
};

template <typename T, int kKeyDim>
__global__ void __launch_bounds__(kParts * 128) delta_net_kernel(DeltaNetArguments<T> a) {
  extern __shared__ float4 shared_quads[];
  const int head = blockIdx.x, sequence = blockIdx.y;
  const int v_width = blockDim.x / kParts, column = threadIdx.x / kParts, part = threadIdx.x % kParts;
  const int dk = a.key_head_dim, dv = a.value_head_dim;
  float* q_s = reinterpret_cast<float*>(shared_quads);
  float* k_s = q_s + kChunkTokens * kKeyDim;
  float* v_s = k_s + kChunkTokens * kKeyDim;
  float* g_s = v_s + kChunkTokens * v_width;
  float* beta_s = g_s + kChunkTokens;
  const int64_t start = a.starts[sequence], length = a.starts[sequence + 1] - start;
  const int64_t committed = a.commit != nullptr && a.commit[sequence] < length ? a.commit[sequence] : length;
  const int64_t state_at = (static_cast<int64_t>(sequence) * a.value_heads + head) * dk * dv;
  const bool owns_column = column < dv;
  StateRows<kKeyDim> state;
  if (a.initial != nullptr && owns_column) {
    state.load(a.initial + state_at, part, column, dk, dv);
  } else {
    for (auto& quad : state.s) quad = make_float4(0, 0, 0, 0);
  }
  if (committed == 0 && a.state_out != nullptr && owns_column) state.store(a.state_out + state_at, part, column, dk, dv);
  for (int64_t first = 0; first < length; first += kChunkTokens) {
    const int count = static_cast<int>(length - first < kChunkTokens ? length - first : kChunkTokens);
    __syncthreads();  // the previous chunk's outputs are written before its staging area is reused
    stage_chunk<T, kKeyDim>(a, sequence, head, start, first, count, q_s, k_s, v_s, g_s, beta_s, v_width);
    __syncthreads();
    for (int u = 0; u < count; ++u) {
      const float read = state.step(q_s + u * kKeyDim, k_s + u * kKeyDim, v_s[u * v_width + column], g_s[u],
                                    beta_s[u], part);
      if (part == 0) v_s[u * v_width + column] = read;  // every part has read v before the shuffles above
      if (first + u + 1 == committed && a.state_out != nullptr && owns_column) {
        state.store(a.state_out + state_at, part, column, dk, dv);
      }
    }
    __syncthreads();
    write_chunk(a, head, start, first, count, v_s, v_width);
  }
}

template <typename T, int kKeyDim>
void launch_delta_net(const DeltaNetArguments<T>& a, int sequences, cudaStream_t stream) {
  const int v_width = (a.value_head_dim + 7) / 8 * 8;  // whole warps: 8 columns of kParts threads each
  const size_t shared = sizeof(float) * kChunkTokens * (2 * kKeyDim + v_width + 2);
  auto kernel = delta_net_kernel<T, kKeyDim>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  kernel<<<dim3(a.value_heads, sequences), v_width * kParts, shared, stream>>>(a);
}

const float* optional_floats(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

bool delta_net_kernel_takes(int64_t key_head_dim, int64_t value_head_dim) {
  return key_head_dim >= 1 && key_head_dim <= 128 && value_head_dim >= 1 && value_head_dim <= 128;
}

at::Tensor delta_net_heads(const DeltaNetKernelInputs& in, at::Tensor* state_out) {
  c10::cuda::CUDAGuard guard(in.projected.device());
  TORCH_CHECK(delta_net_kernel_takes(in.key_head_dim, in.value_head_dim) && in.projected.stride(-1) == 1 &&
                  in.projected.dim() == 2,
              "delta_net_heads: unsupported inputs");
  const int64_t rows = in.projected.size(0), sequences = in.starts.size(0) - 1;
  at::Tensor out = at::empty({rows, in.value_heads * in.value_head_dim}, in.projected.options());
  at::Tensor starts = in.starts.to(at::kLong).contiguous();
  at::Tensor commit = in.commit.defined() ? in.commit.to(at::kLong).contiguous() : at::Tensor();
  at::Tensor initial = in.initial.defined() ? in.initial.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor conv_before =
      in.conv_before.defined() ? in.conv_before.to(in.projected.scalar_type()).contiguous() : at::Tensor();
  if (state_out != nullptr) {
    *state_out = at::empty({sequences, in.value_heads, in.key_head_dim, in.value_head_dim},
                           in.projected.options().dtype(at::kFloat));
  }
  if (sequences == 0) return out;
  at::Tensor conv = in.conv_weight.contiguous(), A_log = in.A_log.contiguous(), dt_bias = in.dt_bias.contiguous();
  at::Tensor norm = in.norm_weight.contiguous();
  auto stream = at::cuda::getCurrentCUDAStream();
  auto launch = [&](auto type) {
    using T = decltype(type);
    const DeltaNetArguments<T> a{
        in.projected.data_ptr<T>(), in.projected.stride(0), starts.data_ptr<int64_t>(), conv.data_ptr<float>(),
        conv_before.defined() ? conv_before.data_ptr<T>() : nullptr, A_log.data_ptr<float>(), dt_bias.data_ptr<float>(),
        norm.data_ptr<float>(), optional_floats(initial), commit.defined() ? commit.data_ptr<int64_t>() : nullptr,
        state_out != nullptr ? state_out->data_ptr<float>() : nullptr, out.data_ptr<T>(),
        static_cast<int>(in.key_heads), static_cast<int>(in.value_heads), static_cast<int>(in.key_head_dim),
        static_cast<int>(in.value_head_dim), static_cast<int>(in.conv_kernel), static_cast<float>(in.eps)};
    const int seqs = static_cast<int>(sequences);
    if (in.key_head_dim <= 16) {
      launch_delta_net<T, 16>(a, seqs, stream);
    } else if (in.key_head_dim <= 32) {
      launch_delta_net<T, 32>(a, seqs, stream);
    } else if (in.key_head_dim <= 64) {
      launch_delta_net<T, 64>(a, seqs, stream);
    } else {
      launch_delta_net<T, 128>(a, seqs, stream);
    }
  };
  switch (in.projected.scalar_type()) {
    case at::kFloat: launch(float{}); break;
    case at::kBFloat16: launch(c10::BFloat16{}); break;
    case at::kHalf: launch(c10::Half{}); break;
    default: TORCH_CHECK(false, "delta_net_heads: unsupported dtype ", in.projected.scalar_type());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace probekit::model::fused
