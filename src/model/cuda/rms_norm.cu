// rms_norm and residual_add (the residual stream's add, fused with the next sub-block's RMS norm): one file, as
// both launch their register kernels through launch_by_quads and so sum a row's squares in the same order.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <type_traits>

#include "model/cuda/cuda_common.cuh"
#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

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

// The register kernels' widest block. Their launch bounds hold each thread to the registers a block this wide
// leaves it (128): the 16-quad kernels wanted up to 188, so rows past 20,480 wide could not launch; they now keep
// part of the row in local memory (widths past 16,384).
constexpr int kMaxQuadThreads = 512;

// Rows of up to 4 quads a thread, when a pass has at most this many, load every operand before any reduction (the
// kernels' kHeld), so that no reduction then waits on memory: a decode step's rows (up to 16 streams of 13 tokens)
// are bound by the trips to memory and the barriers. More rows are bound by the bytes, where the held operands'
// registers (64 against 32 a thread at 2 quads) halve the blocks a multiprocessor keeps: the 4-layer capture ran at
// 974.7 against 982.0 examples/s with every pass held (bench/results/prefetch_and_ratios_h200_2026-11-30.md).
constexpr int64_t kHeldRows = 256;

// A weight's quads for this thread (t, t + blockDim.x, ...), ones for a null weight: held in registers, loaded with
// the row, or read where they are used.
template <int kQuads, bool kHeld>
struct WeightQuads {
  const float* weight;
  float4 held[kHeld ? kQuads : 1];
  __device__ WeightQuads(const float* w, int quads) : weight(w) {
    if constexpr (kHeld) {
#pragma unroll
      for (int q = 0; q < kQuads; ++q) held[q] = read(threadIdx.x + q * blockDim.x, quads);
    }
  }
  __device__ float4 read(int i, int quads) const {
    return weight != nullptr && i < quads ? reinterpret_cast<const float4*>(weight)[i] : float4{1, 1, 1, 1};
  }
  // Quad q of this thread, whose index in the row is i.
  __device__ float4 at(int q, int i, int quads) const {
    if constexpr (kHeld) {
      return held[q];
    } else {
      return read(i, quads);
    }
  }
};

// The RMS norm's factor of a row of `width` whose squares sum to `squares` (summed over the block).
__device__ __forceinline__ float rms_scale(float squares, int64_t width, float eps) {
  return rsqrtf(squares / static_cast<float>(width) + eps);
}

// The end of the register kernels' RMS norm: a row's quads v (this thread's), whose squares the block summed into
// `squares`, written normalized and scaled by `weight` into out_row. One function for both kernels keeps their
// arithmetic the same.
template <typename Out, int kQuads, bool kHeld>
__device__ __forceinline__ void store_normalized(const float (&v)[kQuads][4], float squares,
                                                 const WeightQuads<kQuads, kHeld>& weight, Out* out_row, int64_t width,
                                                 float eps) {
  const float scale = rms_scale(squares, width, eps);
  const int quads = static_cast<int>(width / 4);
  auto* normed = reinterpret_cast<Quad<Out>*>(out_row);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    const float4 w = weight.at(q, i, quads);
    Quad<Out> result;
    result.v[0] = static_cast<Out>(v[q][0] * scale * w.x);
    result.v[1] = static_cast<Out>(v[q][1] * scale * w.y);
    result.v[2] = static_cast<Out>(v[q][2] * scale * w.z);
    result.v[3] = static_cast<Out>(v[q][3] * scale * w.w);
    normed[i] = result;
  }
}

// Adds a branch's quads v (this thread's) times `scale` and its weight into `sum` (this thread's quads of the
// running residual).
template <int kQuads, bool kHeld>
__device__ __forceinline__ void add_quads(float (&sum)[kQuads][4], const float (&v)[kQuads][4], float scale,
                                          const WeightQuads<kQuads, kHeld>& weight, int quads) {
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    const float4 w = weight.at(q, i, quads);
    sum[q][0] = sum[q][0] + v[q][0] * scale * w.x;
    sum[q][1] = sum[q][1] + v[q][1] * scale * w.y;
    sum[q][2] = sum[q][2] + v[q][2] * scale * w.z;
    sum[q][3] = sum[q][3] + v[q][3] * scale * w.w;
  }
}

// The same as residual_add_kernel with the row held in registers: thread t holds the quads t, t + blockDim.x,
// ... (kQuads of them), loaded once with vector accesses and never read back from memory. 1.74x the kernel
// above, which rereads the branch and its own sums (4.1 against 2.3 TB/s on an H200 at width 2560). A second
// branch is added to the first's sum in registers, as a second call would add it to the sum read back. kHeld (see
// kHeldRows) loads every operand first and sums both branches' squares in one reduction.
template <typename Branch, typename Out, int kQuads, bool kHeld>
__global__ void __launch_bounds__(kMaxQuadThreads) residual_add_quads_kernel(ResidualAddArguments<Branch, Out> a) {
  const int64_t row = blockIdx.x;
  const int quads = static_cast<int>(a.width / 4);
  const bool second = a.second_branch != nullptr;
  float sum[kQuads][4], v[kQuads][4], v2[kQuads][4];
  const WeightQuads<kQuads, kHeld> first_weight(a.branch_weight, quads), second_weight(a.second_weight, quads);
  const WeightQuads<kQuads, kHeld> norm_weight(a.norm_weight, quads);
  float squares[2] = {load_quads(a.branch + row * a.width, v, quads), 0.0f};
  if constexpr (kHeld) {
    if (second) squares[1] = load_quads(a.second_branch + row * a.width, v2, quads);
  }
  load_quads(a.residual + row * a.width, sum, quads);
  if (kHeld && second && (a.branch_weight != nullptr || a.second_weight != nullptr)) {
    block_sums(squares);
  } else if (a.branch_weight != nullptr) {
    squares[0] = block_sum(squares[0]);
  }
  add_quads(sum, v, a.branch_weight != nullptr ? rms_scale(squares[0], a.width, a.eps) : 1.0f, first_weight, quads);
  if (second) {
    if constexpr (!kHeld) {  // the second branch takes v's registers once the first is added
      squares[1] = load_quads(a.second_branch + row * a.width, v, quads);
      if (a.second_weight != nullptr) squares[1] = block_sum(squares[1]);
    }
    const float scale = a.second_weight != nullptr ? rms_scale(squares[1], a.width, a.eps) : 1.0f;
    add_quads(sum, kHeld ? v2 : v, scale, second_weight, quads);
  }
  float sum_squares = 0;
  auto* sums = reinterpret_cast<float4*>(a.sum + row * a.width);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int i = threadIdx.x + q * blockDim.x;
    if (i >= quads) continue;
    if (a.sum != nullptr) sums[i] = float4{sum[q][0], sum[q][1], sum[q][2], sum[q][3]};
#pragma unroll
    for (int j = 0; j < 4; ++j) sum_squares += sum[q][j] * sum[q][j];
  }
  if (a.norm_weight == nullptr) return;
  store_normalized(sum, block_sum(sum_squares), norm_weight, a.normed + row * a.width, a.width, a.eps);
}

// rms_norm of a row held in registers as residual_add_quads_kernel holds it: the same squares summed in the
// same order (see launch_by_quads).
template <typename In, typename Out, int kQuads, bool kHeld>
__global__ void __launch_bounds__(kMaxQuadThreads)
    rms_norm_quads_kernel(const In* x, const float* weight, Out* out, int64_t width, float eps) {
  const int64_t row = blockIdx.x;
  const int quads = static_cast<int>(width / 4);
  const WeightQuads<kQuads, kHeld> weights(weight, quads);
  float v[kQuads][4];
  const float squares = load_quads(x + row * width, v, quads);
  store_normalized(v, block_sum(squares), weights, out + row * width, width, eps);
}

// Whether the register kernels take rows of `width`: whole quads, at most 16 a thread in blocks of kMaxQuadThreads.
bool fits_quads(int64_t width) { return width % 4 == 0 && width / 4 <= 16 * kMaxQuadThreads; }

// Calls launch(std::integral_constant<int, kQuads>, std::bool_constant<kHeld>, threads) for the register kernels'
// layout of `rows` rows of `width` (2, 4, 8 or 16 quads a thread, blocks of at most 512 threads: widths up to
// 32,768; kHeld: see kHeldRows); false when the width does not fit it. residual_add and rms_norm share it, so that
// a norm of the same fp32 row sums its squares in the same order in either: a model split over devices normalizes
// at its stage boundary in rms_norm what one device normalizes inside residual_add, and gets the same bits.
template <typename Launch>
bool launch_by_quads(int64_t width, int64_t rows, Launch&& launch) {
  const int64_t quads = width / 4;
  auto with = [&](auto quads_per_thread) {
    constexpr int kQuads = decltype(quads_per_thread)::value;
    const int threads = static_cast<int>((quads + kQuads - 1) / kQuads + 31) / 32 * 32;
    if constexpr (kQuads <= 4) {
      if (rows <= kHeldRows) {
        launch(quads_per_thread, std::true_type{}, threads);
        return true;
      }
    }
    launch(quads_per_thread, std::false_type{}, threads);
    return true;
  };
  if (!fits_quads(width)) return false;
  if (quads <= 2 * kMaxQuadThreads) return with(std::integral_constant<int, 2>{});
  if (quads <= 4 * kMaxQuadThreads) return with(std::integral_constant<int, 4>{});
  if (quads <= 8 * kMaxQuadThreads) return with(std::integral_constant<int, 8>{});
  return with(std::integral_constant<int, 16>{});
}

// The register kernel (`in_registers`: see residual_add), else the plain kernel.
template <typename Branch, typename Out>
void launch_residual_add(const ResidualAddArguments<Branch, Out>& a, int64_t rows, bool in_registers,
                         cudaStream_t stream) {
  if (in_registers) {
    launch_by_quads(a.width, rows, [&](auto quads_per_thread, auto held, int threads) {
      constexpr int kQuads = decltype(quads_per_thread)::value;
      residual_add_quads_kernel<Branch, Out, kQuads, decltype(held)::value><<<rows, threads, 0, stream>>>(a);
    });
    return;
  }
  residual_add_kernel<Branch, Out><<<rows, kThreads, 0, stream>>>(a);
}

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
      if (aligned && launch_by_quads(width, rows, [&](auto quads_per_thread, auto held, int threads) {
            constexpr int kQuads = decltype(quads_per_thread)::value;
            rms_norm_quads_kernel<In, Out, kQuads, decltype(held)::value><<<rows, threads, 0, stream>>>(
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

}  // namespace probekit::model::fused
