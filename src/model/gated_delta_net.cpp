#include "model/gated_delta_net.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

#ifdef PROBEKIT_WITH_CUDA
#include "model/fused_ops.h"
#endif

namespace probekit::model {

namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

// Per-row values [B] as [B, 1, 1, 1], to select whole states.
at::Tensor per_row(const at::Tensor& values) { return values.view({-1, 1, 1, 1}); }

// x / ||x|| over the last dimension, as transformers' (and fla's) l2norm: x * rsqrt(sum x^2 + 1e-6).
at::Tensor l2_normalized(const at::Tensor& x) { return x * at::rsqrt(x.pow(2).sum(-1, true) + 1e-6); }

// [B, H, T, ...] -> [B, H, chunks, chunk, ...], zero-padded to whole chunks: a padded token has k = v = 0,
// beta = 0 and g = 0, so it neither updates nor decays the state.
at::Tensor in_chunks(const at::Tensor& x, int64_t chunks, int64_t chunk) {
  const int64_t missing = chunks * chunk - x.size(2);
  at::Tensor padded = x;
  if (missing > 0) {
    padded = at::constant_pad_nd(
        x, x.dim() == 4 ? std::vector<int64_t>{0, 0, 0, missing} : std::vector<int64_t>{0, missing});
  }
  std::vector<int64_t> shape = {x.size(0), x.size(1), chunks, chunk};
  if (x.dim() == 4) shape.push_back(x.size(3));
  return padded.reshape(shape);
}

// The state after the first n_b tokens of a chunk for each row (n [B] in [0, chunk]), from the state S before it:
// exp(G_n) S + sum_{j < n} exp(G_n - G_j) k_j v'_j^T, G the chunk's cumulative log decay (G_n at token n - 1).
at::Tensor state_within_chunk(const at::Tensor& state, const at::Tensor& k, const at::Tensor& corrected,
                              const at::Tensor& cumulative, const at::Tensor& n) {
  const int64_t batch = k.size(0), heads = k.size(1), chunk = k.size(2);
  at::Tensor last = (n - 1).clamp_min(0).view({batch, 1, 1}).expand({batch, heads, 1});
  at::Tensor decay_to = cumulative.gather(-1, last).masked_fill(n.view({batch, 1, 1}) <= 0, 0.0);  // [B, H, 1]
  at::Tensor inside = at::arange(chunk, n.options()).view({1, 1, chunk}) < n.view({batch, 1, 1});  // [B, 1, chunk]
  at::Tensor weights =
      (decay_to - cumulative).masked_fill(inside.logical_not(), kMinusInfinity).exp();  // [B, H, chunk]
  return state * decay_to.exp().unsqueeze(-1) + at::matmul((k * weights.unsqueeze(-1)).transpose(-1, -2), corrected);
}

}  // namespace

DeltaRuleResult gated_delta_rule_recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& g, const at::Tensor& beta, const at::Tensor& initial,
                                           const at::Tensor& commit) {
  at::Tensor state = initial, committed = initial;
  std::vector<at::Tensor> outputs;
  for (int64_t t = 0; t < q.size(2); ++t) {
    at::Tensor k_t = k.select(2, t);  // [B, H, dk]
    state = state * g.select(2, t).exp().view({state.size(0), state.size(1), 1, 1});
    at::Tensor remembered = at::matmul(k_t.unsqueeze(-2), state).squeeze(-2);  // S^T k_t: [B, H, dv]
    at::Tensor correction = (v.select(2, t) - remembered) * beta.select(2, t).unsqueeze(-1);
    state = state + k_t.unsqueeze(-1) * correction.unsqueeze(-2);
    outputs.push_back(at::matmul(q.select(2, t).unsqueeze(-2), state).squeeze(-2));
    if (commit.defined()) committed = at::where(per_row(commit > t), state, committed);
  }
  return {at::stack(outputs, 2), commit.defined() ? committed : state};
}

// Within chunk c, with G the cumulative log decay from its start (inclusive) and D_ij = exp(G_i - G_j) for j <= i:
// the corrections V' = (I + L)^-1 (beta V - beta K exp(G) S) with L_ij = beta_i (k_i . k_j) D_ij (j < i), so
//   O = (Q exp(G)) S + ((Q K^T) * D) V',   S <- exp(G_last) S + (K exp(G_last - G))^T V'.
// Every exponent is <= 0.
DeltaRuleResult gated_delta_rule_chunked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& g, const at::Tensor& beta, const at::Tensor& initial,
                                         const at::Tensor& commit, int64_t chunk_size) {
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2);
  const int64_t chunk = std::min(chunk_size, tokens), chunks = (tokens + chunk - 1) / chunk;
  at::Tensor queries = in_chunks(q, chunks, chunk), keys = in_chunks(k, chunks, chunk);
  at::Tensor betas = in_chunks(beta, chunks, chunk).unsqueeze(-1);
  at::Tensor cumulative = in_chunks(g, chunks, chunk).cumsum(-1);  // [B, H, chunks, chunk]
  at::Tensor lower = at::ones({chunk, chunk}, q.options().dtype(at::kBool)).tril();
  at::Tensor decay =
      (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(lower.logical_not(), kMinusInfinity).exp();
  at::Tensor weighted_keys = keys * betas;
  at::Tensor identity = at::eye(chunk, q.options());
  at::Tensor system = identity + (at::matmul(weighted_keys, keys.transpose(-1, -2)) * decay).tril(-1);
  at::Tensor inverse = at::linalg_solve_triangular(system, identity.expand_as(system), false, true, true);
  at::Tensor values = at::matmul(inverse, in_chunks(v, chunks, chunk) * betas);
  at::Tensor state_keys = at::matmul(inverse, weighted_keys * cumulative.exp().unsqueeze(-1));
  at::Tensor state = initial, committed = initial;
  std::vector<at::Tensor> outputs;
  for (int64_t c = 0; c < chunks; ++c) {
    at::Tensor q_c = queries.select(2, c), k_c = keys.select(2, c), g_c = cumulative.select(2, c);
    at::Tensor corrected = values.select(2, c) - at::matmul(state_keys.select(2, c), state);  // V' [B, H, chunk, dv]
    at::Tensor scores = at::matmul(q_c, k_c.transpose(-1, -2)) * decay.select(2, c);
    outputs.push_back(at::matmul(q_c * g_c.exp().unsqueeze(-1), state) + at::matmul(scores, corrected));
    if (commit.defined()) {
      at::Tensor candidate = state_within_chunk(state, k_c, corrected, g_c, (commit - c * chunk).clamp(0, chunk));
      committed = at::where(per_row(commit > c * chunk), candidate, committed);
    }
    at::Tensor last = g_c.narrow(-1, chunk - 1, 1);  // [B, H, 1]
    state = state * last.exp().unsqueeze(-1) +
            at::matmul((k_c * (last - g_c).exp().unsqueeze(-1)).transpose(-1, -2), corrected);
  }
  at::Tensor out = at::stack(outputs, 2).reshape({batch, heads, chunks * chunk, v.size(3)}).narrow(2, 0, tokens);
  return {out, commit.defined() ? committed : state};
}

namespace {

// Heads [B, T, count, dim] from `dim`-wide heads starting at channel `offset` of x [B, T, channels].
at::Tensor heads_of(const at::Tensor& x, int64_t offset, int64_t count, int64_t dim) {
  return x.narrow(-1, offset, count * dim).reshape({x.size(0), x.size(1), count, dim});
}

// The gated delta rule's inputs from the convolution's output y [B, T, conv_channels] and the projection's b and
// a [B, T, value_heads]: q (l2-normalized, scaled by dk^-0.5), k (l2-normalized), each key head repeated for its
// value heads, v, g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b); [B, H, T, ...] in fp32.
std::vector<at::Tensor> delta_rule_inputs(const at::Tensor& y, const at::Tensor& b, const at::Tensor& a,
                                          const DeltaNetWeights& w, const LinearAttentionSpec& s) {
  const int64_t repeats = s.value_heads / s.key_heads;
  at::Tensor q =
      l2_normalized(heads_of(y, 0, s.key_heads, s.key_head_dim)) / std::sqrt(static_cast<double>(s.key_head_dim));
  at::Tensor k = l2_normalized(heads_of(y, s.key_dim(), s.key_heads, s.key_head_dim));
  if (repeats > 1) {
    q = q.repeat_interleave(repeats, 2);
    k = k.repeat_interleave(repeats, 2);
  }
  at::Tensor v = heads_of(y, 2 * s.key_dim(), s.value_heads, s.value_head_dim);
  at::Tensor g = -w.A_log.exp() * at::softplus(a.to(at::kFloat) + w.dt_bias);
  at::Tensor beta = at::sigmoid(b.to(at::kFloat));
  return {q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), g.transpose(1, 2), beta.transpose(1, 2)};
}

// The convolution's inputs [B, channels, K - 1 + T]: the K - 1 before the pass (`before`, or zeros), then the
// channels of q, k and v of each token of projected [B, T, P].
at::Tensor conv_inputs(const at::Tensor& projected, const at::Tensor& before, const LinearAttentionSpec& s) {
  const int64_t channels = s.conv_channels();
  at::Tensor earlier = before.defined()
                           ? before.to(projected.scalar_type())
                           : at::zeros({projected.size(0), channels, s.conv_kernel - 1}, projected.options());
  return at::cat({earlier, projected.narrow(-1, 0, channels).transpose(1, 2)}, 2);
}

// The convolution's last K - 1 inputs up to each row's last committed token (all T when `commit` is undefined):
// columns [commit, commit + K - 1) of `inputs`, which begin with the K - 1 from before the pass.
at::Tensor conv_history(const at::Tensor& inputs, const at::Tensor& commit, int64_t history) {
  const int64_t batch = inputs.size(0), tokens = inputs.size(2) - history;
  at::Tensor ends = commit.defined() ? commit.view({batch, 1, 1}).to(inputs.device(), at::kLong).clamp(0, tokens)
                                     : at::full({batch, 1, 1}, tokens,
                                                at::TensorOptions().dtype(at::kLong).device(inputs.device()));
  at::Tensor columns = ends + at::arange(history, ends.options()).view({1, 1, history});
  return inputs.gather(2, columns.expand({batch, inputs.size(1), history}));
}

// delta_net_heads in ATen operations (the reference the kernel is tested against).
at::Tensor heads_in_aten(const at::Tensor& projected, const DeltaNetWeights& w, const ModelConfig& c,
                         DeltaNetState* state, const at::Tensor& commit) {
  const LinearAttentionSpec& s = c.linear_attention;
  const int64_t batch = projected.size(0), tokens = projected.size(1), channels = s.conv_channels();
  at::Tensor inputs = conv_inputs(projected, state != nullptr ? state->conv : at::Tensor(), s);
  // The convolution runs in fp32 (its weight is kept so), as the delta rule after it.
  at::Tensor y = at::silu(at::conv1d(inputs.to(at::kFloat), w.conv.unsqueeze(1), at::Tensor(), at::IntArrayRef{1},
                                     at::IntArrayRef{0}, at::IntArrayRef{1}, channels))
                     .transpose(1, 2);
  const int64_t z_at = channels, b_at = z_at + s.value_dim(), a_at = b_at + s.value_heads;
  std::vector<at::Tensor> in =
      delta_rule_inputs(y, projected.narrow(-1, b_at, s.value_heads), projected.narrow(-1, a_at, s.value_heads), w, s);
  at::Tensor initial = state != nullptr
                           ? state->recurrent
                           : at::zeros({batch, s.value_heads, s.key_head_dim, s.value_head_dim}, y.options());
  DeltaRuleResult result =
      gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], initial, state != nullptr ? commit : at::Tensor());
  if (state != nullptr) *state = {conv_history(inputs, commit, s.conv_kernel - 1), result.state};
  at::Tensor o = result.outputs.transpose(1, 2);  // [B, T, value_heads, dv]
  at::Tensor normalized = o * at::rsqrt(o.pow(2).mean(-1, true) + c.norm_eps) * w.norm;
  at::Tensor gated = normalized * at::silu(heads_of(projected, z_at, s.value_heads, s.value_head_dim).to(at::kFloat));
  return gated.reshape({batch, tokens, s.value_dim()}).to(projected.scalar_type());
}

#ifdef PROBEKIT_WITH_CUDA
bool kernel_takes(const at::Tensor& projected, const ModelConfig& c) {
  return fused::serve(projected) && fused::delta_net_kernel_takes(projected.device(), c.linear_attention.key_head_dim,
                                       c.linear_attention.value_head_dim);
}

// delta_net_heads in the GPU's kernels over the sequences of `starts` among the rows of projected [B, T, P].
at::Tensor heads_in_kernel(const at::Tensor& projected, const at::Tensor& starts, const DeltaNetWeights& w,
                           const ModelConfig& c, DeltaNetState* state, const at::Tensor& commit) {
  const LinearAttentionSpec& s = c.linear_attention;
  fused::DeltaNetKernelInputs in;
  in.projected = projected.reshape({-1, projected.size(-1)});
  in.starts = starts;
  in.conv_weight = w.conv, in.A_log = w.A_log, in.dt_bias = w.dt_bias, in.norm_weight = w.norm;
  if (state != nullptr) in.conv_before = state->conv, in.initial = state->recurrent, in.commit = commit;
  in.key_heads = s.key_heads, in.value_heads = s.value_heads, in.key_head_dim = s.key_head_dim;
  in.value_head_dim = s.value_head_dim, in.conv_kernel = s.conv_kernel, in.eps = c.norm_eps;
  at::Tensor final_state;
  at::Tensor heads = fused::delta_net_heads(in, state != nullptr ? &final_state : nullptr);
  if (state != nullptr) {
    state->conv = conv_history(conv_inputs(projected, state->conv, s), commit, s.conv_kernel - 1);
    state->recurrent = final_state;
  }
  return heads.view({projected.size(0), projected.size(1), s.value_dim()});
}
#endif

}  // namespace

at::Tensor delta_net_heads(const at::Tensor& projected, const DeltaNetWeights& w, const ModelConfig& c,
                           DeltaNetState* state, const at::Tensor& commit) {
#ifdef PROBEKIT_WITH_CUDA
  if (kernel_takes(projected, c)) {
    const int64_t batch = projected.size(0), tokens = projected.size(1);
    return heads_in_kernel(projected, at::arange(batch + 1, projected.options().dtype(at::kLong)) * tokens, w, c,
                           state, commit);
  }
#endif
  return heads_in_aten(projected, w, c, state, commit);
}

at::Tensor packed_delta_net_heads(const at::Tensor& projected, const PackedSequences& packed, const DeltaNetWeights& w,
                                  const ModelConfig& c) {
#ifdef PROBEKIT_WITH_CUDA
  if (kernel_takes(projected, c)) return heads_in_kernel(projected, packed.cumulative_lengths, w, c, nullptr, {});
#endif
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (int64_t length : packed.lengths) {
    parts.push_back(heads_in_aten(projected.narrow(1, start, length), w, c, nullptr, {}));
    start += length;
  }
  return at::cat(parts, 1);
}

at::Tensor delta_net_branch(const at::Tensor& x_in, const LayerWeights& w, const ModelConfig& c, int64_t layer,
                            const AttentionContext& context, const at::Tensor& output_rows) {
  if (context.prefix() != nullptr) {
    fail_input("layer {} is a Gated DeltaNet layer, which cannot continue from a cached prefix of keys and values",
               layer);
  }
  const at::Tensor projected = linear(x_in, w.delta_net.in_proj);  // [B, T, P]: q k v z b a
  at::Tensor mixed;
  if (const PackedSequences* packed = context.packed()) {
    mixed = packed_delta_net_heads(projected, *packed, w.delta_net, c);  // each from an empty state
  } else if (KvCache* cache = context.cache()) {
    const auto at = static_cast<size_t>(layer);
    DeltaNetState state{cache->conv_states.at(at), cache->recurrent_states.at(at)};
    mixed = delta_net_heads(projected, w.delta_net, c, &state, context.commit_tokens());
    cache->conv_states[at] = state.conv;
    cache->recurrent_states[at] = state.recurrent;
  } else {
    mixed = delta_net_heads(projected, w.delta_net, c, nullptr, {});
  }
  return linear(output_rows.defined() ? mixed.index_select(1, output_rows) : mixed, w.attention_output);
}

}  // namespace probekit::model
