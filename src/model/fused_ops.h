// Fused CUDA kernels for the decoder's element-wise work, built only against a CUDA LibTorch. On a GPU the
// matrix products are fast enough that norms, residual adds, rotary embeddings and the gated activation,
// each several passes over memory as separate ATen ops, took as long as the products themselves; each kernel
// here reads its inputs once and writes its outputs once, computing in fp32. The ATen code in
// decoder_block.cpp is the reference they are tested against (tests/gpu).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <utility>
#include <vector>

#include "model/activation.h"

namespace probekit::model::fused {

/// Whether the fused kernels serve a pass over `t`: a GPU tensor, and no gradients asked for (the kernels have no
/// backward; with autograd on, as attribution patching runs it, the ATen ops they replace take over).
inline bool serve(const at::Tensor& t) { return t.is_cuda() && !at::GradMode::is_enabled(); }

/// rows of x (fp32 or the compute dtype) -> rms_norm(row) * weight, in `output` dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType output);

/// A branch added into the residual stream, RMS-normalized with `norm_weight` first when that is defined
/// (Gemma 2/3's post-norms).
struct ResidualBranch {
  at::Tensor values;
  at::Tensor norm_weight;
};

/// residual (fp32) + the branches in order (one or two). Returns the new fp32 residual (undefined when not
/// `sum_wanted`, unless the kernel had to write it), and, when `norm_weight` is defined, the new residual
/// RMS-normalized with it in `output` dtype (the next sub-block's input norm). Two branches give the bits of
/// two calls with one each, in one pass over memory: a layer's second add recomputes the residual after its
/// first rather than reading it back.
std::pair<at::Tensor, at::Tensor> residual_add(const at::Tensor& residual, const std::vector<ResidualBranch>& branches,
                                               const at::Tensor& norm_weight, double eps, at::ScalarType output,
                                               bool sum_wanted = true);

/// act(gate) * up for a gated MLP's fused projection [..., 2 * inner] -> [..., inner]; `limit` is the clamped
/// SwiGLU's (gpt-oss). With `bias` [experts, 2 * inner], rows [M, 2 * inner] are routed experts' products: row r
/// gets bias [row_experts [r]] added first, rounded to the dtype (as an addition would), in the same pass.
at::Tensor gated_activation(const at::Tensor& gate_up, Activation activation, double limit = 0,
                            const at::Tensor& bias = {}, const at::Tensor& row_experts = {});

/// The routed experts' outputs summed per token, in fp32 [tokens, hidden]: token t's output is the sum over its k
/// choices j of weights [t, j] times (rows [row_of_pair [t * k + j]] + bias [pair_experts [t * k + j]]), each row plus
/// its bias rounded to the rows' dtype first, as an addition in that dtype rounds. `rows` [pairs, hidden] in expert
/// order, `bias` [experts, hidden] or undefined. Undefined where the kernel does not take the tensors (rows not a
/// whole number of aligned 16-byte packs).
at::Tensor combine_expert_rows(const at::Tensor& rows, const at::Tensor& row_of_pair, const at::Tensor& pair_experts,
                               const at::Tensor& weights, const at::Tensor& bias);

/// model::decode_mxfp4 on the GPU into `out` [..., G * 32] (fp32, bf16 or fp16) in one pass: the bits of the ATen
/// decoding. False, writing nothing, for tensors it does not take (not contiguous, not 16-byte aligned).
bool decode_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::Tensor& out);

/// From the fused projection qkv [B, T, (heads + 2 * kv_heads) * head_dim], the queries and keys as
/// [B, heads, T, head_dim] and [B, kv_heads, T, head_dim] (transposed views of token-major tensors), each head RMS-normalized with q_weight / k_weight
/// when defined (Qwen 3, Gemma 3) and rotated by cos/sin [B, 1, T, rotary_dim] (fp32) on its first
/// rotary_dim dimensions.
std::pair<at::Tensor, at::Tensor> queries_and_keys(const at::Tensor& qkv, int64_t heads, int64_t kv_heads,
                                                   int64_t head_dim, const at::Tensor& q_weight,
                                                   const at::Tensor& k_weight, double eps, const at::Tensor& cos,
                                                   const at::Tensor& sin, int64_t rotary_dim);

/// Whether `device` runs block-scaled FP8 products (fp8_block_linear): a Hopper GPU, compute capability 9.x.
bool fp8_block_products_available(const at::Device& device);

/// Activations as block-scaled FP8 products take them: x [..., K] (bf16 or fp16, K a multiple of 128) as e4m3 codes
/// [M, K] (uint8) with one fp32 scale per row per 128 inputs [M, K / 128] (a column-major view): each group's
/// largest magnitude over 448, each value divided by it and rounded to the nearest e4m3, saturating.
std::pair<at::Tensor, at::Tensor> quantize_fp8_groups(const at::Tensor& x);

/// x [..., K] times a fine-grained FP8 weight that model::fp8_block_products_take takes, `bytes` [N, K] of float8_e4m3fn codes with `block_scales`
/// [N / 128, K / 128] (its weight_scale_inv), on the tensor cores in FP8 as transformers' FP8Linear computes on a
/// GPU: x quantized by quantize_fp8_groups, each block's partial product scaled by both scales, accumulated in fp32,
/// returned in x's dtype.
at::Tensor fp8_block_linear(const at::Tensor& x, const at::Tensor& bytes, const at::Tensor& block_scales);

/// The most queries a row of a pass may bring to cached_attention (a decode step and the probes' suffix).
constexpr int64_t kCachedAttentionMaxTokens = 32;
/// Up to this many visible slots, batches of fewer than 4 rows take cached_attention's per-query kernel; past it the
/// tiled one, which reads each slot once for all the queries of its kv head (one row of the Gemma-3-4B-shaped step,
/// per-query against tiled: 3.02 and 3.17 ms at 181 slots, 3.37 and 3.26 at 441, 3.99 and 3.32 at 1,141:
/// bench/results/decode_persistent_h200_2026-12-01.md).
constexpr int64_t kCachedAttentionShortSlots = 256;

/// Whether cached_attention's kernel takes heads of `head_dim` in `dtype`, `heads` query heads over `kv_heads` key
/// and value heads, and `tokens` queries a row: 2-byte floats, D 64, 128 or 256, at most kCachedAttentionMaxTokens.
bool cached_attention_takes(at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t tokens);

/// Whether cached_attention takes these queries [B, heads, T, D], keys and values and this cache: shapes its kernel
/// takes (cached_attention_takes), rows of 16-byte packs.
bool cached_attention_serves(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cache_keys,
                             const at::Tensor& cache_values);

/// Generation's attention over its cache in one kernel: each query of q [B, heads, T, D] attending to the slots up
/// to its position among the first `visible` (and within `window` of it when > 0), query head h reading kv head
/// h / (heads / kv_heads): no repeated keys, no mask tensor; the pass's keys and values k, v [B, kv_heads, T, D]
/// (`positions` [B, T] consecutive within a row) are read for its own slots and written into cache_keys /
/// cache_values [B, kv_heads, capacity, D] at them. `sinks` [heads] (gpt-oss; or undefined): each head's logit in the
/// softmax's denominator. Returns [B, heads, T, D], a transposed view of token-major memory.
/// Two kernels: the tiled one (tensor cores, each key and value read once for the queries that share it) for
/// batches of 4 rows or more, or more than kCachedAttentionShortSlots visible slots, where the device and shape
/// allow, else one block per query; `kernel` picks one (the tests compare both).
enum class CachedAttentionKernel { kChosen, kPerQuery, kTiled };
/// Whether the tiled kernel takes a pass of `tokens` queries a row over `heads` / `kv_heads` heads of `head_dim` on
/// the current device: tensor cores of compute capability 8.0 or later (and code built for them), a block's shared
/// memory within the device's, its output tiles within its warps'.
bool tiled_cached_attention_takes(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t tokens);
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& cache_keys,
                            at::Tensor& cache_values, const at::Tensor& positions, int64_t visible, int64_t window,
                            double scale, const at::Tensor& sinks = {},
                            CachedAttentionKernel kernel = CachedAttentionKernel::kChosen);

/// A Gated DeltaNet layer's mixer from its input projection (model/gated_delta_net.h's arithmetic, its reference).
struct DeltaNetKernelInputs {
  at::Tensor projected;  // [N, channels + value_dim + 2 * value_heads] rows, unit stride within a row: q k v z b a
  at::Tensor starts;     // [S + 1] int64: sequence s is rows [starts [s], starts [s + 1])
  at::Tensor conv_weight, A_log, dt_bias, norm_weight;  // fp32, as DeltaNetWeights holds them
  at::Tensor conv_before;  // [S, channels, conv_kernel - 1]: the convolution's inputs before each sequence; or zeros
  at::Tensor initial;      // [S, value_heads, dk, dv] fp32: each sequence's state before it; or zeros
  at::Tensor commit;       // [S] int64: the state returned is the one after this many tokens; or after all
  int64_t key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0, conv_kernel = 0;
  double eps = 0;  // the output's RMSNorm
};

/// Whether delta_net_heads runs on `device` for heads of these widths: compute capability 8.0 on (the 97 KB of shared
/// memory a block stages in), dk and dv at most 128 (a head's state in one block's registers).
bool delta_net_kernel_takes(const at::Device& device, int64_t key_head_dim, int64_t value_head_dim);

/// The mixer's gated, normalized heads [N, value_dim] in the projection's dtype, in three kernels: the convolution with
/// q and k normalized, the gated delta rule token by token in fp32 (a block per sequence and head), the gated RMSNorm. With
/// `state_out` it also returns each sequence's state after its committed tokens [S, value_heads, dk, dv].
at::Tensor delta_net_heads(const DeltaNetKernelInputs& in, at::Tensor* state_out);

/// model::decode_fp8_rows on the GPU: one pass reading the FP8 bytes and their row scales, writing `dtype`.
at::Tensor decode_fp8_rows(const at::Tensor& bytes, const at::Tensor& row_scales, int64_t block_in, at::ScalarType dtype);

}  // namespace probekit::model::fused
