#include "model/decoder_block.h"

#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "common/error.h"
#include "device/torch/row_stable.h"
#include "model/fixed_order_attention.h"
#include "model/gated_delta_net.h"
#include "model/latent_attention.h"
#include "model/routed_experts.h"

#ifdef PROBEKIT_WITH_CUDA
#include "device/torch/cuda/gpu_cuda.h"
#include "model/fused_ops.h"
#endif

namespace probekit::model {

namespace {

at::Tensor activate(const at::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kSilu: return at::silu(x);
    case Activation::kGeluTanh: return at::gelu(x, "tanh");
    case Activation::kGeluExact: return at::gelu(x);
    case Activation::kClampedSwiglu: fail("the clamped SwiGLU activates an expert's gate and up projections together");
  }
  return x;
}

// x / rms(x) over the last dimension, in fp32.
at::Tensor rms_normalized(const at::Tensor& x, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  return x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
}

at::Tensor rotate_half(const at::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t rotary_dim) {
  if (rotary_dim == x.size(-1)) return x * cos + rotate_half(x) * sin;
  at::Tensor rotating = x.narrow(-1, 0, rotary_dim);
  at::Tensor passing = x.narrow(-1, rotary_dim, x.size(-1) - rotary_dim);
  return at::cat({rotating * cos + rotate_half(rotating) * sin, passing}, -1);
}

namespace {

// Softmax probabilities [B, heads, T, S] of scores [B, heads, T, S] in fp32; with `sinks` [heads] (gpt-oss) each
// head's sink logit joins the denominator as one more column, which has no value and is dropped.
at::Tensor attention_probabilities(const at::Tensor& scores, const at::Tensor& sinks) {
  if (!sinks.defined()) return at::softmax(scores, -1, at::kFloat);
  at::Tensor sink_column = sinks.view({1, -1, 1, 1}).expand({scores.size(0), -1, scores.size(2), 1});
  at::Tensor combined = at::cat({scores.to(at::kFloat), sink_column.to(at::kFloat)}, -1);
  return at::softmax(combined, -1).narrow(-1, 0, scores.size(-1));
}

}  // namespace

// Attention sinks take the explicit path here: the SDPA kernels have no sink column (packed_attention applies them
// to the flash kernel's output).
at::Tensor attention(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& mask, double scale,
                     const std::optional<double>& softcap, const at::Tensor& sinks) {
  if (fixed_order_attention_takes(q, k, v)) return fixed_order_attention(q, k, v, mask, scale, softcap, sinks);
  const int64_t repeats = q.size(1) / k.size(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // The flash kernel reads key/value head h / repeats itself (enable_gqa, LibTorch 2.5 on): no repeated copy
  // of the keys and values. It serves causal attention without a mask only.
  if (!softcap && !sinks.defined() && !mask.defined() && q.is_cuda()) {
    return at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, true, scale, repeats > 1);
  }
#endif
  if (repeats > 1) {
    // Query head h reads key/value head h / repeats, as transformers' repeat_kv.
    k = k.repeat_interleave(repeats, 1);
    v = v.repeat_interleave(repeats, 1);
  }
  // scaled_dot_product_attention (flash / memory-efficient kernels) with an explicit scale exists from
  // LibTorch 2.1 on; soft-capping needs the scores, so it always takes the explicit path.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (!softcap && !sinks.defined()) {
    return at::scaled_dot_product_attention(q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt,
                                            0.0, !mask.defined(), scale);
  }
#endif
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (softcap) scores = at::tanh(scores / *softcap) * *softcap;
  at::Tensor allowed = mask;
  if (!allowed.defined()) {
    allowed = at::ones({q.size(2), k.size(2)}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril();
  }
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probabilities = attention_probabilities(scores, sinks).to(q.scalar_type());
  return at::matmul(probabilities, v);
}

namespace {

// Causal attention of one sequence alone, q [1, heads, T, d], within a sliding window (0: none).
at::Tensor attention_alone(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t sliding_window,
                           double scale, const std::optional<double>& softcap, const at::Tensor& sinks) {
  const int64_t tokens = q.size(2);
  at::Tensor mask;
  if (sliding_window > 0 && tokens > sliding_window) {
    at::Tensor index = at::arange(tokens, at::TensorOptions().dtype(at::kLong).device(q.device()));
    at::Tensor distance = index.unsqueeze(1) - index.unsqueeze(0);  // query - key
    mask = ((distance >= 0) & (distance < sliding_window)).view({1, 1, tokens, tokens});
  }
  return attention(q, k, v, mask, scale, softcap, sinks);
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
// Attention sinks applied to the kernel's output: with the sink logit t of a head in the softmax's denominator each
// probability is e^s / (sum e^s + e^t), the kernel's e^s / sum e^s times 1 / (1 + e^(t - lse)) = sigmoid(lse - t),
// lse = log sum e^s, which the kernel returns beside its output [N, heads, d] as [heads, N].
at::Tensor with_sinks(const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& sinks) {
  const int64_t tokens = out.size(0), heads = out.size(1);
  TORCH_CHECK(logsumexp.dim() == 2 && logsumexp.size(0) == heads && logsumexp.size(1) == tokens,
              "attention sinks: the flash kernel's logsumexp has shape ", logsumexp.sizes());
  at::Tensor kept = at::sigmoid(logsumexp - sinks.to(logsumexp.device(), at::kFloat).view({heads, 1}));  // [heads, N]
  return (out.to(at::kFloat) * kept.transpose(0, 1).unsqueeze(-1)).to(out.scalar_type());
}
#endif

}  // namespace

at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const PackedSequences& packed,
                            int64_t sliding_window, double scale, const std::optional<double>& softcap,
                            const at::Tensor& sinks) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  if (q.is_cuda() && !softcap && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf)) {
    const int64_t longest = *std::max_element(packed.lengths.begin(), packed.lengths.end());
    // The kernel's window: key j is seen from query i when i - window_left <= j <= i.
    std::optional<int64_t> left, right;
    if (sliding_window > 0) {
      left = sliding_window - 1;
      right = 0;
    }
    // The kernel takes values as wide as the keys: narrower ones (latent attention's) are padded with zeros, whose
    // outputs are zeros, cut off again.
    const int64_t value_dim = v.size(-1), padding = q.size(-1) - value_dim;
    at::Tensor values = padding > 0 ? at::constant_pad_nd(v, {0, padding}) : v;
    auto result = at::_flash_attention_forward(q[0].transpose(0, 1), k[0].transpose(0, 1), values[0].transpose(0, 1),
                                               packed.cumulative_lengths, packed.cumulative_lengths, longest, longest,
                                               0.0, true, false, scale, left, right);
    at::Tensor out = std::get<0>(result);  // [N, heads, d]
    if (sinks.defined()) out = with_sinks(out, std::get<1>(result), sinks);
    return out.narrow(-1, 0, value_dim).transpose(0, 1).unsqueeze(0);
  }
#endif
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (int64_t length : packed.lengths) {
    parts.push_back(attention_alone(q.narrow(2, start, length), k.narrow(2, start, length), v.narrow(2, start, length),
                                    sliding_window, scale, softcap, sinks));
    start += length;
  }
  return at::cat(parts, 2);
}

namespace {

// The fused CUDA kernels serve the RMSNorm families on GPU tensors; everything else takes the ATen ops.
bool fused_path(const at::Tensor& x, const ModelConfig& c) {
#ifdef PROBEKIT_WITH_CUDA
  return fused::serve(x) && c.features.norm == NormKind::kRmsNorm;
#else
  (void)x;
  (void)c;
  return false;
#endif
}

// The input of a projection: x normalized, in `dtype`; x as it is where the layer has no such norm (OLMo 2).
at::Tensor norm_to(const at::Tensor& x, const Norm& norm, const ModelConfig& c, at::ScalarType dtype) {
  if (!norm.defined()) return x.to(dtype);
#ifdef PROBEKIT_WITH_CUDA
  if (fused_path(x, c)) return fused::rms_norm(x, norm.weight, c.norm_eps, dtype);
#endif
  return apply_norm(x, norm, c, dtype);
}

// A branch added into the residual stream, normalized by its post-norm first when that is defined.
struct BranchOutput {
  at::Tensor values;
  Norm norm;
};

// residual + each branch in turn; plus the sum normalized by next_norm into `dtype` when defined (the input of
// the next sub-block). The fused kernel leaves the sum undefined when not `sum_wanted`.
std::pair<at::Tensor, at::Tensor> add_branches(const at::Tensor& residual, const std::vector<BranchOutput>& branches,
                                               const Norm& next_norm, const ModelConfig& c, at::ScalarType dtype,
                                               bool sum_wanted = true) {
#ifdef PROBEKIT_WITH_CUDA
  if (fused_path(residual, c)) {
    std::vector<fused::ResidualBranch> fused_branches;
    for (const BranchOutput& branch : branches) fused_branches.push_back({branch.values, branch.norm.weight});
    return fused::residual_add(residual, fused_branches, next_norm.weight, c.norm_eps, dtype, sum_wanted);
  }
#endif
  at::Tensor sum = residual;
  for (const BranchOutput& branch : branches) {
    sum = sum + (branch.norm.defined() ? apply_norm(branch.values, branch.norm, c, at::kFloat) : branch.values.to(at::kFloat));
  }
  return {sum, next_norm.defined() ? apply_norm(sum, next_norm, c, dtype) : at::Tensor()};
}

// The heads of one layer's attention (Gemma 4's full layers have their own head_dim).
struct HeadShape {
  int64_t heads, kv_heads, head_dim;

  HeadShape(const ModelConfig& c, int64_t layer)
      : heads(c.num_heads), kv_heads(layer_kv_heads(c, layer)), head_dim(layer_head_dim(c, layer)) {}
  int64_t q_out() const { return heads * head_dim; }
  int64_t kv_out() const { return kv_heads * head_dim; }
};

// Queries [B, heads, T, head_dim] and keys [B, kv_heads, T, head_dim] from the fused projection: q/k norms
// (per head: Qwen 3, Gemma 3; over the whole projection: OLMo 2) and rotary embedding applied.
std::pair<at::Tensor, at::Tensor> queries_and_keys(at::Tensor qkv, const LayerWeights& w, const ModelConfig& c,
                                                   const LayerSpec& spec, const HeadShape& shape,
                                                   AttentionContext& context, at::ScalarType compute) {
  const int64_t batch = qkv.size(0), tokens = qkv.size(1);
  const int64_t q_out = shape.q_out(), kv_out = shape.kv_out();
  const bool per_head_norm = c.features.qk_norm == QkNorm::kPerHead;
  if (c.features.qk_norm == QkNorm::kWholeProjection) {
    qkv = at::cat({norm_to(qkv.narrow(-1, 0, q_out), w.q_norm, c, compute),
                   norm_to(qkv.narrow(-1, q_out, kv_out), w.k_norm, c, compute), qkv.narrow(-1, q_out + kv_out, kv_out)},
                  -1);
  }
#ifdef PROBEKIT_WITH_CUDA
  if (fused_path(qkv, c) && spec.rope.type != RopeType::kNone) {
    const auto& [cos, sin] = context.rotary(spec.rope);
    return fused::queries_and_keys(qkv, shape.heads, shape.kv_heads, shape.head_dim,
                                   per_head_norm ? w.q_norm.weight : at::Tensor(),
                                   per_head_norm ? w.k_norm.weight : at::Tensor(), c.norm_eps, cos, sin,
                                   spec.rope.rotary_dim);
  }
#endif
  at::Tensor q = qkv.narrow(-1, 0, q_out).view({batch, tokens, shape.heads, shape.head_dim});
  at::Tensor k = qkv.narrow(-1, q_out, kv_out).view({batch, tokens, shape.kv_heads, shape.head_dim});
  if (per_head_norm) {
    q = apply_norm(q, w.q_norm, c, compute);
    k = apply_norm(k, w.k_norm, c, compute);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  if (spec.rope.type != RopeType::kNone) {
    const auto& [cos, sin] = context.rotary(spec.rope);
    q = apply_rotary(q.to(at::kFloat), cos, sin, spec.rope.rotary_dim).to(compute);
    k = apply_rotary(k.to(at::kFloat), cos, sin, spec.rope.rotary_dim).to(compute);
  }
  return {q, k};
}

// What a layer gives its hook, and the writes into its sites.
struct LayerHook {
  const TensorHook* hook;
  uint32_t sites;
  int64_t layer;
  const StreamWrites* writes;

  bool wants(Site site) const { return hook != nullptr && (sites & site_bit(site)) != 0; }
  const StreamEdit* edit(Site site) const { return writes != nullptr ? writes->find(site, layer) : nullptr; }
  void emit(Site site, const at::Tensor& t) const { (*hook)(site, layer, t); }
  /// The site's values with this layer's writes applied, given to the hook when it asks for them; `branch_input`:
  /// the input of the branch whose output the site is (mlp_out's), which a transcoder's clamp encodes.
  at::Tensor written(Site site, at::Tensor t, const BranchInput& branch_input = {}) const {
    if (const StreamEdit* e = edit(site)) t = e->apply(t, branch_input);
    if (wants(site)) emit(site, t);
    return t;
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> cached_keys_and_values(KvCache& cache, int64_t layer, const at::Tensor& k,
                                                         const at::Tensor& v, const AttentionContext& context) {
  at::Tensor& keys = cache.keys.at(static_cast<size_t>(layer));
  at::Tensor& values = cache.values.at(static_cast<size_t>(layer));
  at::Tensor slots = context.positions().view({k.size(0), 1, k.size(2), 1});
  keys.scatter_(2, slots.expand(k.sizes()), k);
  values.scatter_(2, slots.expand(v.sizes()), v);
  return {keys.narrow(2, 0, context.cache_visible()), values.narrow(2, 0, context.cache_visible())};
}

namespace {

// The attention sub-block's output [B, T, hidden] (before any post-norm) for its input x_in (compute dtype), at
// the tokens `output_rows` only when defined.
at::Tensor attention_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                            AttentionContext& context, KvCache* record, const at::Tensor& output_rows) {
  const LayerSpec& spec = c.layers[static_cast<size_t>(layer)];
  const HeadShape shape(c, layer);
  const int64_t batch = x_in.size(0), tokens = x_in.size(1);
  const int64_t q_out = shape.q_out(), kv_out = shape.kv_out();
  at::Tensor qkv = linear(x_in, w.qkv);
  auto [q, k] = queries_and_keys(qkv, w, c, spec, shape, context, x_in.scalar_type());  // [B, heads, T, head_dim]
  at::Tensor v = qkv.narrow(-1, q_out + kv_out, kv_out).view({batch, tokens, shape.kv_heads, shape.head_dim});
  if (c.features.value_norm) v = rms_normalized(v, c.norm_eps).to(x_in.scalar_type());
  v = v.transpose(1, 2);
  if (record != nullptr) {
    record->keys.push_back(k);
    record->values.push_back(v);
  }
  at::Tensor attended;
  if (KvCache* cache = context.cache()) {
#ifdef PROBEKIT_WITH_CUDA
    at::Tensor& cache_keys = cache->keys.at(static_cast<size_t>(layer));
    at::Tensor& cache_values = cache->values.at(static_cast<size_t>(layer));
    if (!c.features.attn_softcap && fused::cached_attention_serves(q, k, v, cache_keys, cache_values)) {
      attended = fused::cached_attention(q, k, v, cache_keys, cache_values, context.positions(), context.cache_visible(),
                                         spec.sliding_window, c.attention_scale, w.attention_sinks);
    }
#endif
    if (!attended.defined()) std::tie(k, v) = cached_keys_and_values(*cache, layer, k, v, context);
  } else if (const KvCache* prefix = context.prefix()) {
    const at::Tensor& prefix_keys = prefix->keys.at(static_cast<size_t>(layer));
    const at::Tensor& prefix_values = prefix->values.at(static_cast<size_t>(layer));
    k = at::cat({prefix_keys.expand({batch, -1, -1, -1}), k}, 2);
    v = at::cat({prefix_values.expand({batch, -1, -1, -1}), v}, 2);
  }
  if (!attended.defined()) {
    attended = context.packed() != nullptr
                   ? packed_attention(q, k, v, *context.packed(), spec.sliding_window, c.attention_scale,
                                      c.features.attn_softcap, w.attention_sinks)
                   : attention(q, k, v, context.mask(spec.sliding_window), c.attention_scale, c.features.attn_softcap,
                               w.attention_sinks);
  }
  at::Tensor heads = attended.transpose(1, 2).reshape({batch, tokens, q_out});
  at::Tensor x = x_in;
  if (output_rows.defined()) {
    heads = heads.index_select(1, output_rows);
    x = x.index_select(1, output_rows);
  }
  if (w.attention_gate.defined()) heads = heads * at::sigmoid(linear(x, w.attention_gate));
  return linear(heads, w.attention_output);
}

// The token mixer's branch: attention, latent attention, or a Gated DeltaNet (whose attn_out site is its
// out_proj's output).
at::Tensor mixer_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                        AttentionContext& context, KvCache* record, const at::Tensor& output_rows) {
  const Mixer mixer = c.layers[static_cast<size_t>(layer)].mixer;
  if (mixer == Mixer::kAttention) return attention_branch(x_in, w, c, layer, context, record, output_rows);
  if (mixer == Mixer::kLatentAttention) return latent_attention_branch(x_in, w, c, layer, context, record, output_rows);
  if (record != nullptr) {
    // No keys and values: the layer keeps its place in the record (a prefix read from it is refused).
    record->keys.emplace_back();
    record->values.emplace_back();
  }
  return delta_net_branch(x_in, w, c, layer, context, output_rows);
}

// The feed-forward sub-block's output [B, T, hidden] for its input x_in (compute dtype): the dense MLP, or the
// routed experts, whose routing the hook is given when it asks.
at::Tensor feed_forward(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, const LayerHook& hook) {
  if (const auto* dense = std::get_if<DenseMlp>(&w.feed_forward)) return dense_mlp(x_in, *dense, c);
  const auto& experts = std::get<RoutedExperts>(w.feed_forward);
  const int64_t batch = x_in.size(0), tokens = x_in.size(1);
  at::Tensor rows = x_in.reshape({batch * tokens, x_in.size(2)});
  Routing routing = route_tokens(rows, experts, c.routed_experts);
  if (hook.wants(Site::kRouter)) hook.emit(Site::kRouter, routing.logits.view({batch, tokens, -1}));
  if (hook.wants(Site::kExperts)) {
    // The chosen ids are exact in fp32, ahead of their weights.
    hook.emit(Site::kExperts, at::cat({routing.experts.to(at::kFloat), routing.weights}, -1).view({batch, tokens, -1}));
  }
  return run_routed_experts(rows, routing, experts, c).view({batch, tokens, -1});
}

// Gemma 4's last steps of a layer: its own input [B, T, size] gated by the stream (act(gate(h)) * input,
// projected back and normalized) added to the stream, then the whole stream scaled by layer_scalar.
at::Tensor add_per_layer_input(at::Tensor out, const LayerWeights& w, const ModelConfig& c, const at::Tensor& inputs,
                               at::ScalarType compute) {
  if (w.per_layer_input_gate.defined()) {
    at::Tensor gated = activate(linear(out.to(compute), w.per_layer_input_gate), c.features.activation) *
                       inputs.to(out.device(), compute);
    out = out + apply_norm(linear(gated, w.per_layer_projection), w.post_per_layer_input_norm, c, at::kFloat);
  }
  return w.layer_scalar.defined() ? out * w.layer_scalar : out;
}

}  // namespace

at::Tensor per_layer_inputs(const at::Tensor& input_ids, const at::Tensor& embeddings, const ModelWeights& w,
                            const ModelConfig& c) {
  if (c.per_layer_input_size == 0) return {};
  const int64_t batch = input_ids.size(0), tokens = input_ids.size(1), size = c.per_layer_input_size;
  const at::Tensor& table = w.embed_tokens_per_layer;
  // transformers' scales, as Python floats multiplied in: sqrt(size) on the table, 1 / sqrt(hidden) on the
  // projection, 1 / sqrt(2) on the sum.
  at::Tensor own = at::embedding(table, input_ids.to(table.device())).to(at::kFloat) * std::sqrt(static_cast<double>(size));
  const at::Tensor& projection = w.per_layer_model_projection;
  at::Tensor projected =
      device::row_stable_linear(embeddings.to(projection.device(), projection.scalar_type()), projection).to(at::kFloat) *
      std::pow(static_cast<double>(c.hidden_size), -0.5);
  projected = apply_norm(projected.view({batch, tokens, c.num_layers, size}), w.per_layer_projection_norm, c, at::kFloat);
  return (projected + own.view({batch, tokens, c.num_layers, size})) * std::pow(2.0, -0.5);
}

at::Tensor dense_mlp(const at::Tensor& x, const DenseMlp& mlp, const ModelConfig& c) {
  at::Tensor h = linear(x, mlp.in);
  if (!c.features.gated_mlp) return linear(activate(h, c.features.activation), mlp.out);
  return linear(gated_activation(h, c.features.activation), mlp.out);
}

at::Tensor gated_activation(const at::Tensor& gate_up, Activation activation) {
#ifdef PROBEKIT_WITH_CUDA
  // A dense MLP's activations; the clamped SwiGLU, routed experts' only, takes its limit there (routed_experts.cpp)
  // and is refused below (activate) on every device.
  if (fused::serve(gate_up) && activation != Activation::kClampedSwiglu) return fused::gated_activation(gate_up, activation);
#endif
  std::vector<at::Tensor> halves = gate_up.chunk(2, -1);
  return activate(halves[0], activation) * halves[1];
}

at::Tensor apply_norm(const at::Tensor& x, const Norm& norm, const ModelConfig& config, at::ScalarType output) {
  if (config.features.norm == NormKind::kLayerNorm) {
    return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, norm.weight, norm.bias, config.norm_eps).to(output);
  }
  return (rms_normalized(x, config.norm_eps) * norm.weight).to(output);
}

at::Tensor normalized_before_weight(const at::Tensor& x, NormKind kind, double eps) {
  if (kind == NormKind::kLayerNorm) return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, eps);
  return rms_normalized(x, eps);
}

bool cached_attention_is_fused(const ModelConfig& config, at::Device device, at::ScalarType dtype, int64_t tokens) {
#ifdef PROBEKIT_WITH_CUDA
  if (!device.is_cuda() || config.features.attn_softcap) return false;
  for (int64_t i = 0; i < static_cast<int64_t>(config.layers.size()); ++i) {
    const HeadShape shape(config, i);
    if (config.layers[static_cast<size_t>(i)].mixer != Mixer::kAttention ||
        !fused::cached_attention_takes(dtype, shape.heads, shape.kv_heads, shape.head_dim, tokens)) {
      return false;
    }
  }
  return true;
#else
  (void)config, (void)device, (void)dtype, (void)tokens;
  return false;
#endif
}

bool packed_attention_is_fast(const ModelConfig& config, at::Device device, at::ScalarType dtype) {
#if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)) && defined(PROBEKIT_WITH_CUDA)
  if (!device.is_cuda() || (dtype != at::kBFloat16 && dtype != at::kHalf)) return false;
  if (config.features.attn_softcap) return false;
  // Gated DeltaNet layers take packed sequences in their kernels, whose recurrence runs a block per sequence and head.
  const LinearAttentionSpec& linear = config.linear_attention;
  if (has_recurrent_layers(config) &&
      !fused::delta_net_kernel_takes(device, linear.key_head_dim, linear.value_head_dim)) {
    return false;
  }
  for (int64_t i = 0; i < static_cast<int64_t>(config.layers.size()); ++i) {
    const int64_t head_dim = layer_head_dim(config, i);
    if (config.layers[static_cast<size_t>(i)].rope.type == RopeType::kLongRope || head_dim > 256 || head_dim % 8 != 0) {
      return false;
    }
  }
  return device::cuda::capability_major(device.index()) >= 8;
#else
  (void)config, (void)device, (void)dtype;
  return false;
#endif
}

ResidualStream decoder_block(const ResidualStream& stream, const LayerPass& pass) {
  const LayerWeights& w = pass.weights;
  const ModelConfig& c = pass.config;
  const int64_t layer = pass.layer;
  const at::Tensor& output_rows = pass.output_rows;
  // o_proj (out_proj) is there whatever the layer's mixer.
  const at::ScalarType compute = w.attention_output.dtype();
  const LayerHook hook{pass.hook, pass.hook_sites, layer, pass.writes};
  if (hook.wants(Site::kResidPre)) hook.emit(Site::kResidPre, stream.residual);

  const at::Tensor attention_in = stream.next_input.defined()
                                      ? stream.next_input
                                      : norm_to(stream.residual, w.attention_input_norm, c, compute);
  at::Tensor attention_out = mixer_branch(attention_in, w, c, layer, pass.context, pass.record, output_rows);
  const at::Tensor x = output_rows.defined() ? stream.residual.index_select(1, output_rows) : stream.residual;
  // A branch's post-norm (Gemma 2/3, OLMo 2) is applied inside the residual add, unless the hook wants the branch
  // or a write changes it.
  Norm attention_norm = w.attention_output_norm;
  if (hook.wants(Site::kAttnOut) || hook.edit(Site::kAttnOut) != nullptr) {
    if (attention_norm.defined()) attention_out = norm_to(attention_out, attention_norm, c, at::kFloat);
    attention_norm = Norm{};
    attention_out = hook.written(Site::kAttnOut, attention_out);
  }

  if (c.features.parallel_residual) {
    const at::Tensor mlp_in = norm_to(x, w.mlp_input_norm, c, compute);
    if (hook.wants(Site::kLn2Normalized)) hook.emit(Site::kLn2Normalized, normalized_before_weight(x, c.features.norm, c.norm_eps));
    if (hook.wants(Site::kMlpIn)) hook.emit(Site::kMlpIn, mlp_in);
    at::Tensor mlp_out = hook.written(Site::kMlpOut, feed_forward(mlp_in, w, c, hook), {mlp_in, x});
    if (hook.wants(Site::kResidMid)) hook.emit(Site::kResidMid, x + attention_out);
    at::Tensor out = mlp_out.to(at::kFloat) + attention_out.to(at::kFloat) + x;  // transformers' order of the sum
    return {hook.written(Site::kResidPost, out), {}, stream.per_layer_inputs};
  }
  // Unless something reads the residual between the branches (an ln2_normalized transcoder's clamp into mlp_out
  // may), the fused path leaves it unwritten and the MLP's add recomputes it from the attention branch: one pass
  // over memory less than writing it and reading it back.
  const BranchOutput attention{attention_out, attention_norm};
  const StreamEdit* mlp_edit = hook.edit(Site::kMlpOut);
  const bool keep_middle = hook.wants(Site::kResidMid) || hook.wants(Site::kLn2Normalized) ||
                           (mlp_edit != nullptr && mlp_edit->reads_before_norm) || !c.features.input_norms;
  auto [middle, mlp_in] = add_branches(x, {attention}, w.mlp_input_norm, c, compute, keep_middle);
  if (hook.wants(Site::kResidMid)) hook.emit(Site::kResidMid, middle);
  if (hook.wants(Site::kLn2Normalized)) hook.emit(Site::kLn2Normalized, normalized_before_weight(middle, c.features.norm, c.norm_eps));
  if (!c.features.input_norms) mlp_in = middle.to(compute);
  if (hook.wants(Site::kMlpIn)) hook.emit(Site::kMlpIn, mlp_in);
  at::Tensor mlp_out = feed_forward(mlp_in, w, c, hook);
  Norm mlp_norm = w.mlp_output_norm;
  if (hook.wants(Site::kMlpOut) || mlp_edit != nullptr) {
    if (mlp_norm.defined()) mlp_out = norm_to(mlp_out, mlp_norm, c, at::kFloat);
    mlp_norm = Norm{};
    mlp_out = hook.written(Site::kMlpOut, mlp_out, {mlp_in, middle});
  }
  const BranchOutput mlp{mlp_out, mlp_norm};
  // A write into the layer's output comes before the next layer's input norm, which then normalizes it itself,
  // as it does after Gemma 4's last steps.
  const bool ends_later = w.per_layer_input_gate.defined() || w.layer_scalar.defined();
  const Norm no_norm;
  const Norm& next = hook.edit(Site::kResidPost) != nullptr || ends_later ? no_norm : pass.next_norm;
  auto [out, next_input] = middle.defined() ? add_branches(middle, {mlp}, next, c, compute)
                                            : add_branches(x, {attention, mlp}, next, c, compute);
  if (ends_later) {
    at::Tensor inputs;
    if (stream.per_layer_inputs.defined()) {
      inputs = stream.per_layer_inputs.select(2, layer);
      if (output_rows.defined()) inputs = inputs.index_select(1, output_rows);
    }
    out = add_per_layer_input(out, w, c, inputs, compute);
  }
  return {hook.written(Site::kResidPost, out), next_input, stream.per_layer_inputs};
}

}  // namespace probekit::model
