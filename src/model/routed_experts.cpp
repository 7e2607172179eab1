#include "model/routed_experts.h"

#include <torch/csrc/api/include/torch/version.h>

#include "device/torch/row_stable.h"
#ifdef PROBEKIT_WITH_CUDA
#include "device/torch/cuda/gpu_cuda.h"
#endif

#include "model/decoder_block.h"
#include "model/quantization.h"

#ifdef PROBEKIT_WITH_CUDA
#include "model/fused_ops.h"
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define PROBEKIT_HAS_GROUPED_MM 1
#endif

namespace probekit::model {

namespace {

#if defined(PROBEKIT_HAS_GROUPED_MM) && defined(PROBEKIT_WITH_CUDA)
// The most bytes a layer's packed experts may take decoded at once for the grouped product: gpt-oss-120b's 128 MXFP4
// experts take 6.4 GB; DeepSeek-V3's 256 FP8 experts (22.5 GB) decode one expert with tokens at a time instead.
constexpr int64_t kMaxDecodedExpertBytes = int64_t{8} << 30;

// The values a layer's packed experts hold (0 for stacked ones).
int64_t packed_expert_values(const RoutedExperts& w) {
  if (w.gate_up_fp8.defined()) return w.gate_up_fp8.bytes.numel() + w.down_fp8.bytes.numel();
  if (w.gate_up_mxfp4.defined()) return 2 * (w.gate_up_mxfp4.blocks.numel() + w.down_mxfp4.blocks.numel());
  return 0;
}
#endif

// Whether at::_grouped_mm runs the experts as one kernel: bf16 operands on a Hopper GPU (compute capability 9.x,
// where LibTorch has its CUTLASS kernel from 2.8 on; elsewhere it refuses, or loops over the groups with host
// syncs of its own), and rows whose byte strides are multiples of 16, as the kernel needs. MXFP4 and FP8 experts
// kept packed are decoded to bf16 for it, all of a layer's at once, up to kMaxDecodedExpertBytes.
bool grouped_gemm_fits(const at::Tensor& rows, const RoutedExperts& w) {
#if defined(PROBEKIT_HAS_GROUPED_MM) && defined(PROBEKIT_WITH_CUDA)
  if (!fused::serve(rows) || rows.scalar_type() != at::kBFloat16) return false;
  if (w.gate_up.defined() && w.gate_up.scalar_type() != at::kBFloat16) return false;
  if (2 * packed_expert_values(w) > kMaxDecodedExpertBytes) return false;
  const int64_t inner = w.down.defined()         ? w.down.size(2)
                        : w.down_fp8.defined()   ? w.down_fp8.bytes.size(2)
                                                 : w.down_mxfp4.scales.size(-1) * 32;
  if (rows.size(1) % 8 != 0 || inner % 8 != 0) return false;
  return device::cuda::capability_major(rows.device().index()) == 9;
#else
  (void)rows;
  (void)w;
  return false;
#endif
}

// A product [M, out] plus its rows' experts' bias: b [experts, out] undefined for none; `row_experts` [M] the
// expert of each row.
at::Tensor plus_bias(const at::Tensor& product, const at::Tensor& bias, const at::Tensor& row_experts) {
  return bias.defined() ? product + bias.index_select(0, row_experts) : product;
}

// act(gate + bias) * (up + bias) of the experts' fused projection [M, 2 * inner], `bias` [experts, 2 * inner] (or
// undefined) by each row's expert (`row_experts` [M]): one fused kernel on a GPU (in fp32), else ATen ops.
at::Tensor expert_activation(const at::Tensor& product, const at::Tensor& bias, const at::Tensor& row_experts,
                             Activation activation, double limit) {
#ifdef PROBEKIT_WITH_CUDA
  if (fused::serve(product)) return fused::gated_activation(product, activation, limit, bias, row_experts);
#endif
  const at::Tensor gate_up = plus_bias(product, bias, row_experts);
  if (activation != Activation::kClampedSwiglu) return gated_activation(gate_up, activation);
  std::vector<at::Tensor> halves = gate_up.chunk(2, -1);
  at::Tensor gate = halves[0].clamp_max(limit), up = halves[1].clamp(-limit, limit);
  return (up + 1) * (gate * at::sigmoid(gate * static_cast<double>(kClampedSwigluAlpha)));
}

// Packed FP8 experts' weights [experts, out, in] decoded into `dtype`, their rows taken as one matrix's.
at::Tensor decoded_fp8_experts(const Fp8Weight& w, at::ScalarType dtype) {
  const at::Tensor bytes = w.bytes.flatten(0, 1), scales = w.row_scales.flatten(0, 1);
  return decode_fp8_rows(bytes, scales, w.block_in, dtype).view(w.bytes.sizes());
}

// Every expert's weights [experts, out, in] in `dtype`: the stacked ones, or all decoded from MXFP4 or FP8 (a scratch
// for one batch's products, freed after them).
std::pair<at::Tensor, at::Tensor> stacked_weights(const RoutedExperts& w, at::ScalarType dtype) {
  if (w.gate_up.defined()) return {w.gate_up, w.down};
  if (w.gate_up_fp8.defined()) return {decoded_fp8_experts(w.gate_up_fp8, dtype), decoded_fp8_experts(w.down_fp8, dtype)};
  return {decode_mxfp4(w.gate_up_mxfp4.blocks, w.gate_up_mxfp4.scales, dtype),
          decode_mxfp4(w.down_mxfp4.blocks, w.down_mxfp4.scales, dtype)};
}

// Expert e's weight [out, in] in `dtype`: a view of the stacked weights, or decoded from MXFP4 or FP8 (a scratch of
// one expert's weight, freed after its product).
at::Tensor expert_weight(const at::Tensor& stacked, const Mxfp4Weight& mxfp4, const Fp8Weight& fp8, int64_t e,
                         at::ScalarType dtype) {
  if (stacked.defined()) return stacked[e];
  if (fp8.defined()) return decode_fp8_rows(fp8.bytes[e], fp8.row_scales[e], fp8.block_in, dtype);
  return decode_mxfp4(mxfp4.blocks[e], mxfp4.scales[e], dtype);
}

// Every expert's MLP over its slice of `sorted` [M, hidden] (token rows sorted by expert, whose ids are
// `sorted_experts` [M]; expert e's slice ends at row ends[e], int32 on the device), in the compute dtype, without
// the down projection's bias: the caller adds it to the rounded product on every path, as the grouped product always
// had it, on a GPU as it combines the rows.
at::Tensor expert_products(const at::Tensor& sorted, const at::Tensor& sorted_experts, const at::Tensor& ends,
                           const RoutedExperts& w, const ModelConfig& c) {
  const Activation activation = c.features.activation;
  const double limit = c.routed_experts.swiglu_limit;
  const at::ScalarType dtype = sorted.scalar_type();
#ifdef PROBEKIT_HAS_GROUPED_MM
  if (grouped_gemm_fits(sorted, w)) {
    // The second operands are [experts, in, out] views of the [experts, out, in] weights.
    auto [gate_up_weight, down_weight] = stacked_weights(w, dtype);
    at::Tensor gate_up = at::_grouped_mm(sorted, gate_up_weight.transpose(1, 2), ends);
    at::Tensor inner = expert_activation(gate_up, w.gate_up_bias, sorted_experts, activation, limit);
    return at::_grouped_mm(inner, down_weight.transpose(1, 2), ends);
  }
#endif
  // The portable way: the slice sizes read once on the host, then one pair of products per expert with tokens.
  at::Tensor host_ends = ends.to(at::kCPU);
  const int32_t* end = host_ends.data_ptr<int32_t>();
  const int64_t hidden = sorted.size(1);
  at::Tensor out = at::empty({sorted.size(0), hidden}, sorted.options());
  int64_t start = 0;
  for (int64_t e = 0; e < host_ends.size(0); ++e) {
    const int64_t count = end[e] - start;
    if (count == 0) continue;
    at::Tensor gate_weight = expert_weight(w.gate_up, w.gate_up_mxfp4, w.gate_up_fp8, e, dtype);
    at::Tensor gate_up = device::row_stable_linear(sorted.narrow(0, start, count), gate_weight,
                                                   w.gate_up_bias.defined() ? w.gate_up_bias[e] : at::Tensor());
    out.narrow(0, start, count)
        .copy_(device::row_stable_linear(expert_activation(gate_up, {}, {}, activation, limit),
                                         expert_weight(w.down, w.down_mxfp4, w.down_fp8, e, dtype)));
    start = end[e];
  }
  return out;
}

// DeepSeek V3's choice, in transformers' order: sigmoid scores; each group of experts scored by the sum of its two
// best biased scores; the biased scores outside the top_groups best groups set to 0.0 (not -inf: with a negative
// bias an expert of a dropped group can still beat the kept ones, as in the reference); the top k biased scores
// chosen, weighted by their unbiased scores, renormalised (+1e-20) and scaled.
void route_sigmoid_grouped(Routing& routing, const RoutedExperts& w, const RoutedExpertsSpec& spec) {
  const int64_t tokens = routing.logits.size(0), experts = spec.experts, groups = spec.groups;
  at::Tensor scores = at::sigmoid(routing.logits);
  at::Tensor biased = scores + w.score_correction_bias;
  at::Tensor group_scores = std::get<0>(biased.view({tokens, groups, experts / groups}).topk(2, -1)).sum(-1);
  at::Tensor kept_groups = std::get<1>(at::topk(group_scores, spec.top_groups, -1));
  at::Tensor kept = at::zeros_like(group_scores, at::kBool).scatter_(1, kept_groups, true);
  kept = kept.unsqueeze(-1).expand({tokens, groups, experts / groups}).reshape({tokens, experts});
  routing.experts = std::get<1>(at::topk(biased.masked_fill(kept.logical_not(), 0.0), spec.top_k, -1));
  at::Tensor weights = scores.gather(1, routing.experts);
  if (spec.normalize_top_k) weights = weights / (weights.sum(-1, true) + 1e-20);
  routing.weights = weights * spec.routed_scaling_factor;
}

// The experts' output rows (in expert order: row r is pair order[r]'s, `sorted_experts` their experts) plus their
// down projection's bias, weighted and summed per token in fp32, like the residual stream it joins: one kernel on a
// GPU, else the rows back in pair order and a weighted sum.
at::Tensor combine_outputs(const at::Tensor& sorted_outputs, const at::Tensor& order, const at::Tensor& pair_experts,
                           const at::Tensor& sorted_experts, const at::Tensor& weights, const at::Tensor& bias) {
#ifdef PROBEKIT_WITH_CUDA
  if (fused::serve(sorted_outputs)) {
    at::Tensor row_of_pair = at::empty_like(order).index_copy_(0, order, at::arange(order.size(0), order.options()));
    at::Tensor combined = fused::combine_expert_rows(sorted_outputs, row_of_pair, pair_experts, weights, bias);
    if (combined.defined()) return combined;
  }
#endif
  at::Tensor rows = plus_bias(sorted_outputs, bias, sorted_experts);
  at::Tensor outputs = at::empty_like(rows).index_copy_(0, order, rows).view({weights.size(0), weights.size(1), -1});
  return (outputs.to(at::kFloat) * weights.unsqueeze(-1)).sum(1);
}

}  // namespace

Routing route_tokens(const at::Tensor& x, const RoutedExperts& w, const RoutedExpertsSpec& spec) {
  Routing routing;
  // A router kept in fp32 (DeepSeek V3) takes the tokens in fp32, as the reference casts them.
  const at::Tensor rows = x.to(w.router.scalar_type());
  routing.logits = device::row_stable_linear(rows, w.router, w.router_bias).to(at::kFloat);
  if (spec.scoring == RouterScoring::kSigmoidGroupedTopK) {
    route_sigmoid_grouped(routing, w, spec);
    return routing;
  }
  if (spec.scoring == RouterScoring::kTopKSoftmax) {
    auto [top_logits, experts] = at::topk(routing.logits, spec.top_k, -1);
    routing.weights = at::softmax(top_logits, -1);
    routing.experts = experts;
    return routing;
  }
  auto [weights, experts] = at::topk(at::softmax(routing.logits, -1), spec.top_k, -1);
  routing.weights = spec.normalize_top_k ? weights / weights.sum(-1, true) : weights;
  routing.experts = experts;
  return routing;
}

at::Tensor run_routed_experts(const at::Tensor& x, const Routing& routing, const RoutedExperts& w,
                              const ModelConfig& c) {
  const int64_t tokens = x.size(0), k = routing.experts.size(1);
  // Pair i is token i / k's choice i % k. Sorted by expert, each expert's pairs form one slice.
  at::Tensor pair_experts = routing.experts.reshape({-1});
  at::Tensor order = at::argsort(pair_experts);
  at::Tensor sorted_experts = pair_experts.index_select(0, order);
  at::Tensor ends = at::searchsorted(sorted_experts, at::arange(c.routed_experts.experts, sorted_experts.options()),
                                     /*out_int32=*/true, /*right=*/true);
  at::Tensor sorted_outputs = expert_products(x.index_select(0, order.div(k, "trunc")), sorted_experts, ends, w, c);
  at::Tensor out = combine_outputs(sorted_outputs, order, pair_experts, sorted_experts, routing.weights, w.down_bias);
  if (w.shared_expert.in.defined()) {
    at::Tensor shared = dense_mlp(x, w.shared_expert, c).to(at::kFloat);
    if (w.shared_expert_gate.defined()) {
      shared = shared * at::sigmoid(device::row_stable_linear(x, w.shared_expert_gate).to(at::kFloat));
    }
    out = out + shared;
  }
  return out;
}

}  // namespace probekit::model
