// fused::delta_net_heads: a Gated DeltaNet layer's mixer after its input projection in three kernels. The ATen
// arithmetic of model/gated_delta_net.cpp (the reference they are tested against) runs the delta rule in chunks of
// fp32 products and some forty element-wise passes over memory; here the state S [dk, dv] stays in registers for
// the whole sequence and each token updates it once, as the recurrence is written: on a GPU the sequential steps
// cost less than the passes they replace. The first kernel computes every token's inputs to the recurrence (the
// convolution, q and k normalized, g and beta) in parallel; the second runs the recurrence, one thread block per
// sequence and value head, copying the next tokens' inputs into shared memory while it steps through the current
// ones; the third the gated RMSNorm.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_pipeline.h>

#include <cstdint>

#include "device/torch/cuda/gpu_cuda.h"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

// Threads sharing a pair of columns of a head's state, each holding an eighth of its rows.
constexpr int kParts = 8;
// The widest head (dk and dv): a block's 512 threads hold 128 x 128 fp32 state in registers.
constexpr int kMaxHeadDim = 128;
// Tokens staged in shared memory at a time, twice over: one chunk read while the next is copied in.
constexpr int kChunkTokens = 32;
constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
  return value;
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// ATen's softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The recurrence's inputs per token, fp32: q and k zero-padded to key_width (32, 64 or 128), v to value_width (a
// multiple of 8).
struct RecurrenceInputs {
  float* qk;      // [N, key_heads, 2, key_width]: q (l2-normalized, scaled by dk^-0.5), then k (l2-normalized)
  float* v;       // [N, value_heads, value_width]
  float2* decay;  // [N, value_heads]: g, beta
  int key_width, value_width;
};

template <typename T>
struct PrepareArguments {
  const T* projected;        // [N, row_stride]: each token's q k v (the convolution's channels), z, b, a
  int64_t row_stride;
  const int64_t* starts;     // [sequences + 1]
  int sequences;
  const float* conv_weight;  // [channels, conv_kernel]
  const T* conv_before;      // [sequences, channels, conv_kernel - 1], or null: zeros before each sequence
  const float* A_log;        // [value_heads]
  const float* dt_bias;      // [value_heads]
  RecurrenceInputs out;
  int key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel;
};

// The causal convolution (after silu) at `channel` of row `row`, the sequence's token `position`.
template <typename T>
__device__ float convolved(const PrepareArguments<T>& a, int64_t row, int64_t position, int sequence, int channel) {
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

// One block per token: a warp per vector (each key head's q and k, each value head's v), then g and beta.
template <typename T>
__global__ void prepare_kernel(PrepareArguments<T> a) {
  const int64_t row = blockIdx.x;
  int low = 0, high = a.sequences;  // the sequence holding `row`: starts[low] <= row < starts[low + 1]
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    (a.starts[middle] <= row ? low : high) = middle;
  }
  const int64_t position = row - a.starts[low];
  const int lane = threadIdx.x % kWarp, dk = a.key_head_dim, dv = a.value_head_dim, key_dim = a.key_heads * dk;
  for (int vector = threadIdx.x / kWarp; vector < 2 * a.key_heads + a.value_heads; vector += blockDim.x / kWarp) {
    const bool is_value = vector >= 2 * a.key_heads;
    const int width = is_value ? dv : dk, padded = is_value ? a.out.value_width : a.out.key_width;
    const int first_channel = is_value ? 2 * key_dim + (vector - 2 * a.key_heads) * dv
                                       : (vector % 2) * key_dim + vector / 2 * dk;  // q, k of key head vector / 2
    float y[kMaxHeadDim / kWarp];
    float squares = 0;
    for (int j = 0; j < kMaxHeadDim / kWarp; ++j) {
      const int i = lane + j * kWarp;
      y[j] = i < width ? convolved(a, row, position, low, first_channel + i) : 0.0f;
      squares += y[j] * y[j];
    }
    float scale = 1.0f;
    if (!is_value) scale = rsqrtf(warp_sum(squares) + 1e-6f) * (vector % 2 == 0 ? rsqrtf(static_cast<float>(dk)) : 1.0f);
    float* out = is_value ? a.out.v + (row * a.value_heads + vector - 2 * a.key_heads) * padded
                          : a.out.qk + (row * a.key_heads * 2 + vector) * padded;
    for (int j = 0; j < kMaxHeadDim / kWarp; ++j) {
      if (lane + j * kWarp < padded) out[lane + j * kWarp] = y[j] * scale;
    }
  }
  const int channels = 2 * key_dim + a.value_heads * dv;
  const T* tail = a.projected + row * a.row_stride + channels + a.value_heads * dv;  // b, then a
  for (int head = threadIdx.x; head < a.value_heads; head += blockDim.x) {
    const float decay_input = static_cast<float>(tail[a.value_heads + head]) + a.dt_bias[head];
    a.out.decay[row * a.value_heads + head] =
        make_float2(-expf(a.A_log[head]) * softplus(decay_input), 1.0f / (1.0f + expf(-static_cast<float>(tail[head]))));
  }
}

struct RecurrenceArguments {
  RecurrenceInputs in;
  const int64_t* starts;  // [sequences + 1]
  const float* initial;   // [sequences, value_heads, dk, dv], or null: zeros
  const int64_t* commit;  // [sequences], or null: the state after every token
  float* state_out;       // [sequences, value_heads, dk, dv], or null
  float* read;            // [N, value_heads * dv]: S^T q of each token, before the norm
  int key_heads, value_heads, key_head_dim, value_head_dim;
};

// A chunk of tokens' inputs in shared memory: q and k of the block's key head, v, g and beta.
struct Staged {
  float* qk;      // [kChunkTokens][2 * key_width]
  float* v;       // [kChunkTokens][value_width]
  float2* decay;  // [kChunkTokens]

  __host__ __device__ static size_t bytes(int key_width, int value_width) {
    return sizeof(float) * kChunkTokens * (2 * key_width + value_width) + sizeof(float2) * kChunkTokens;
  }

  __device__ Staged(char* base, int key_width, int value_width) {
    qk = reinterpret_cast<float*>(base);
    v = qk + kChunkTokens * 2 * key_width;
    decay = reinterpret_cast<float2*>(v + kChunkTokens * value_width);
  }
};

// Starts copying tokens [first, first + count) of the block's sequence (rows from `start`) into `to`, 16 bytes (or
// one float2) a copy, without waiting for them.
__device__ void copy_chunk(const RecurrenceArguments& a, int head, int key_head, int64_t start, int64_t first,
                           int count, const Staged& to) {
  const int key_quads = 2 * a.in.key_width / 4, value_quads = a.in.value_width / 4, per_token = key_quads + value_quads + 1;
  for (int i = threadIdx.x; i < count * per_token; i += blockDim.x) {
    const int u = i / per_token, item = i % per_token;
    const int64_t row = start + first + u;
    if (item < key_quads) {
      __pipeline_memcpy_async(to.qk + u * 2 * a.in.key_width + item * 4,
                              a.in.qk + (row * a.key_heads + key_head) * 2 * a.in.key_width + item * 4, 16);
    } else if (item < key_quads + value_quads) {
      const int quad = item - key_quads;
      __pipeline_memcpy_async(to.v + u * a.in.value_width + quad * 4,
                              a.in.v + (row * a.value_heads + head) * a.in.value_width + quad * 4, 16);
    } else {
      __pipeline_memcpy_async(to.decay + u, a.in.decay + row * a.value_heads + head, sizeof(float2));
    }
  }
  __pipeline_commit();
}

// This thread's tile of a head's state: two adjacent columns, kKeyDim / kParts of their rows. Float4 f holds rows
// (f * kParts + part) * 4 ... + 3, so that the parts of a column pair read consecutive 16-byte words of a staged
// vector; the column sums gather over the kParts threads of a pair with shuffles.
template <int kKeyDim>
struct StateTile {
  static constexpr int kQuads = kKeyDim / kParts / 4;
  float4 s[2][kQuads];

  __device__ static int row(int quad, int part) { return (quad * kParts + part) * 4; }

  __device__ void load(const float* state, int part, int column, int dk, int dv) {
    for (int c = 0; c < 2; ++c) {
      const bool owned = column + c < dv;
      for (int f = 0; f < kQuads; ++f) {
        const int i = row(f, part);
        s[c][f].x = owned && i + 0 < dk ? state[(i + 0) * dv + column + c] : 0.0f;
        s[c][f].y = owned && i + 1 < dk ? state[(i + 1) * dv + column + c] : 0.0f;
        s[c][f].z = owned && i + 2 < dk ? state[(i + 2) * dv + column + c] : 0.0f;
        s[c][f].w = owned && i + 3 < dk ? state[(i + 3) * dv + column + c] : 0.0f;
      }
    }
  }

  __device__ void store(float* state, int part, int column, int dk, int dv) const {
    for (int c = 0; c < 2; ++c) {
      if (column + c >= dv) continue;
      for (int f = 0; f < kQuads; ++f) {
        const int i = row(f, part);
        if (i + 0 < dk) state[(i + 0) * dv + column + c] = s[c][f].x;
        if (i + 1 < dk) state[(i + 1) * dv + column + c] = s[c][f].y;
        if (i + 2 < dk) state[(i + 2) * dv + column + c] = s[c][f].z;
        if (i + 3 < dk) state[(i + 3) * dv + column + c] = s[c][f].w;
      }
    }
  }

  // The sum over the kParts threads of a column pair.
  __device__ static float gather(float value) {
    for (int offset = 1; offset < kParts; offset *= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
  }

  __device__ static float dot(const float4& a, const float4& b) {
    return (a.x * b.x + a.y * b.y) + (a.z * b.z + a.w * b.w);
  }

  // One token: S <- exp(g) S + k (beta (v - exp(g) S^T k))^T; returns S^T q for both columns (every part gets it).
  __device__ float2 step(const float* q, const float* k, float2 v, float g, float beta, int part) {
    float4 keys[kQuads];
    float remembered[2] = {0, 0};
    for (int f = 0; f < kQuads; ++f) {
      keys[f] = reinterpret_cast<const float4*>(k)[f * kParts + part];
      remembered[0] += dot(s[0][f], keys[f]);
      remembered[1] += dot(s[1][f], keys[f]);
    }
    const float decay = expf(g);
    const float correction[2] = {beta * (v.x - decay * gather(remembered[0])),
                                 beta * (v.y - decay * gather(remembered[1]))};
    float read[2] = {0, 0};
    for (int f = 0; f < kQuads; ++f) {
      const float4 query = reinterpret_cast<const float4*>(q)[f * kParts + part];
      for (int c = 0; c < 2; ++c) {
        s[c][f].x = decay * s[c][f].x + keys[f].x * correction[c];
        s[c][f].y = decay * s[c][f].y + keys[f].y * correction[c];
        s[c][f].z = decay * s[c][f].z + keys[f].z * correction[c];
        s[c][f].w = decay * s[c][f].w + keys[f].w * correction[c];
        read[c] += dot(s[c][f], query);
      }
    }
    return make_float2(gather(read[0]), gather(read[1]));
  }
};

template <int kKeyDim>
__global__ void __launch_bounds__(kMaxHeadDim / 2 * kParts) recurrence_kernel(RecurrenceArguments a) {
  extern __shared__ float4 shared_quads[];
  const int sequence = blockIdx.x, head = blockIdx.y, key_head = head / (a.value_heads / a.key_heads);
  const int column = threadIdx.x / kParts * 2, part = threadIdx.x % kParts;
  const int dk = a.key_head_dim, dv = a.value_head_dim;
  const int64_t start = a.starts[sequence], length = a.starts[sequence + 1] - start;
  const size_t buffer_bytes = Staged::bytes(a.in.key_width, a.in.value_width);
  auto buffer = [&](int64_t chunk) {  // chunks alternate between two buffers
    return Staged(reinterpret_cast<char*>(shared_quads) + chunk % 2 * buffer_bytes, a.in.key_width, a.in.value_width);
  };
  int64_t committed = a.commit != nullptr ? a.commit[sequence] : length;
  committed = committed < 0 ? 0 : committed > length ? length : committed;
  const int64_t state_at = (static_cast<int64_t>(sequence) * a.value_heads + head) * dk * dv;
  StateTile<kKeyDim> state;
  if (a.initial != nullptr) {
    state.load(a.initial + state_at, part, column, dk, dv);
  } else {
    for (auto& columns : state.s) {
      for (auto& quad : columns) quad = make_float4(0, 0, 0, 0);
    }
  }
  if (committed == 0 && a.state_out != nullptr) state.store(a.state_out + state_at, part, column, dk, dv);
  auto count_at = [&](int64_t first) {
    return static_cast<int>(length - first < kChunkTokens ? length - first : kChunkTokens);
  };
  if (length > 0) copy_chunk(a, head, key_head, start, 0, count_at(0), buffer(0));
  for (int64_t first = 0, chunk = 0; first < length; first += kChunkTokens, ++chunk) {
    const int64_t next = first + kChunkTokens;
    if (next < length) {
      copy_chunk(a, head, key_head, start, next, count_at(next), buffer(chunk + 1));
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    const Staged st = buffer(chunk);
    for (int u = 0; u < count_at(first); ++u) {
      const float2 v = *reinterpret_cast<const float2*>(st.v + u * a.in.value_width + column);
      const float* q = st.qk + u * 2 * a.in.key_width;
      const float2 decay = st.decay[u];
      const float2 read = state.step(q, q + a.in.key_width, v, decay.x, decay.y, part);
      float* out = a.read + (start + first + u) * a.value_heads * dv + head * dv + column;
      if (part == 0 && column < dv) out[0] = read.x;
      if (part == 0 && column + 1 < dv) out[1] = read.y;
      if (first + u + 1 == committed && a.state_out != nullptr) state.store(a.state_out + state_at, part, column, dk, dv);
    }
    __syncthreads();  // every thread is done with this buffer before the next copy into it
  }
}

// out = read * rsqrt(mean(read^2) + eps) * weight * silu(z) over each head of each token: one warp per head.
template <typename T>
__global__ void gated_norm_kernel(const float* read, const T* projected, int64_t row_stride, int64_t z_at,
                                  const float* weight, T* out, int64_t rows, int heads, int dv, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x % kWarp;
  const float* o = read + row * dv;
  float squares = 0;
  for (int j = lane; j < dv; j += kWarp) squares += o[j] * o[j];
  const float scale = rsqrtf(warp_sum(squares) / static_cast<float>(dv) + eps);
  const T* z = projected + row / heads * row_stride + z_at + row % heads * dv;
  for (int j = lane; j < dv; j += kWarp) {
    out[row * dv + j] = static_cast<T>(o[j] * scale * weight[j] * silu(static_cast<float>(z[j])));
  }
}

template <int kKeyDim>
void launch_recurrence(const RecurrenceArguments& a, int sequences, cudaStream_t stream) {
  const size_t shared = 2 * Staged::bytes(a.in.key_width, a.in.value_width);
  auto kernel = recurrence_kernel<kKeyDim>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  kernel<<<dim3(sequences, a.value_heads), a.in.value_width / 2 * kParts, shared, stream>>>(a);
}

const float* optional_floats(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

bool delta_net_kernel_takes(const at::Device& device, int64_t key_head_dim, int64_t value_head_dim) {
  return device.is_cuda() && key_head_dim >= 1 && key_head_dim <= kMaxHeadDim && value_head_dim >= 1 &&
         value_head_dim <= kMaxHeadDim && device::cuda::capability_major(device.index()) >= 8;
}

at::Tensor delta_net_heads(const DeltaNetKernelInputs& in, at::Tensor* state_out) {
  c10::cuda::CUDAGuard guard(in.projected.device());
  TORCH_CHECK(delta_net_kernel_takes(in.projected.device(), in.key_head_dim, in.value_head_dim) && in.projected.dim() == 2 &&
                  in.projected.stride(-1) == 1,
              "delta_net_heads: unsupported inputs");
  const int64_t rows = in.projected.size(0), sequences = in.starts.size(0) - 1;
  const int64_t value_dim = in.value_heads * in.value_head_dim;
  const at::TensorOptions floats = in.projected.options().dtype(at::kFloat);
  at::Tensor out = at::empty({rows, value_dim}, in.projected.options());
  if (state_out != nullptr) *state_out = at::empty({sequences, in.value_heads, in.key_head_dim, in.value_head_dim}, floats);
  if (sequences == 0 || rows == 0) {
    if (state_out != nullptr && sequences > 0) {
      *state_out = in.initial.defined() ? in.initial.to(at::kFloat).clone() : at::zeros_like(*state_out);
    }
    return out;
  }
  const int key_width = in.key_head_dim <= 32 ? 32 : in.key_head_dim <= 64 ? 64 : 128;
  const int value_width = static_cast<int>((in.value_head_dim + 7) / 8 * 8);  // whole warps: 4 column pairs each
  at::Tensor qk = at::empty({rows, in.key_heads, 2, key_width}, floats);
  at::Tensor v = at::empty({rows, in.value_heads, value_width}, floats);
  at::Tensor decay = at::empty({rows, in.value_heads, 2}, floats);
  at::Tensor read = at::empty({rows, value_dim}, floats);
  const RecurrenceInputs staged{qk.data_ptr<float>(), v.data_ptr<float>(), reinterpret_cast<float2*>(decay.data_ptr<float>()),
                                key_width, value_width};
  const at::Device device = in.projected.device();
  at::Tensor starts = in.starts.to(device, at::kLong).contiguous();
  at::Tensor commit = in.commit.defined() ? in.commit.to(device, at::kLong).contiguous() : at::Tensor();
  at::Tensor initial = in.initial.defined() ? in.initial.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor conv_before =
      in.conv_before.defined() ? in.conv_before.to(in.projected.scalar_type()).contiguous() : at::Tensor();
  at::Tensor conv = in.conv_weight.contiguous(), A_log = in.A_log.contiguous(), dt_bias = in.dt_bias.contiguous();
  at::Tensor norm = in.norm_weight.contiguous();
  const int64_t z_at = 2 * in.key_heads * in.key_head_dim + value_dim;
  auto stream = at::cuda::getCurrentCUDAStream();
  auto launch = [&](auto type) {
    using T = decltype(type);
    const PrepareArguments<T> prepare{
        in.projected.data_ptr<T>(), in.projected.stride(0), starts.data_ptr<int64_t>(), static_cast<int>(sequences),
        conv.data_ptr<float>(), conv_before.defined() ? conv_before.data_ptr<T>() : nullptr, A_log.data_ptr<float>(),
        dt_bias.data_ptr<float>(), staged, static_cast<int>(in.key_heads), static_cast<int>(in.value_heads),
        static_cast<int>(in.key_head_dim), static_cast<int>(in.value_head_dim), static_cast<int>(in.conv_kernel)};
    prepare_kernel<T><<<rows, 256, 0, stream>>>(prepare);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const RecurrenceArguments recurrence{
        staged, starts.data_ptr<int64_t>(), optional_floats(initial), commit.defined() ? commit.data_ptr<int64_t>() : nullptr,
        state_out != nullptr ? state_out->data_ptr<float>() : nullptr, read.data_ptr<float>(),
        static_cast<int>(in.key_heads), static_cast<int>(in.value_heads), static_cast<int>(in.key_head_dim),
        static_cast<int>(in.value_head_dim)};
    const int seqs = static_cast<int>(sequences);
    if (key_width == 32) {
      launch_recurrence<32>(recurrence, seqs, stream);
    } else if (key_width == 64) {
      launch_recurrence<64>(recurrence, seqs, stream);
    } else {
      launch_recurrence<128>(recurrence, seqs, stream);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t head_rows = rows * in.value_heads;
    constexpr int kWarpsPerBlock = 8;
    gated_norm_kernel<T><<<(head_rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * kWarp, 0, stream>>>(
        read.data_ptr<float>(), in.projected.data_ptr<T>(), in.projected.stride(0), z_at, norm.data_ptr<float>(),
        out.data_ptr<T>(), head_rows, static_cast<int>(in.value_heads), static_cast<int>(in.value_head_dim),
        static_cast<float>(in.eps));
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
