// gated_activation: act(gate) * up from a gated MLP's fused projection, routed experts' biases added in the
// same pass.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

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

}  // namespace

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

}  // namespace probekit::model::fused
