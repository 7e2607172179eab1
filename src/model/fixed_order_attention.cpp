#include "model/fixed_order_attention.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "device/torch/row_stable.h"

namespace probekit::model {

namespace {

// The operands of one pass, as raw rows: q [B, heads, T, D], k [B, kv_heads, S, D], v [B, kv_heads, S, Dv],
// out [B, heads, T, Dv], the mask's element strides over [B, heads, T, S] (null: causal).
struct AttentionRows {
  const float *q, *k, *v, *sinks;
  float* out;
  const bool* allowed;
  int64_t allowed_strides[4];
  int64_t heads, kv_heads, tokens, slots, depth, value_depth;
  float scale;
  std::optional<float> softcap;
};

bool sees(const AttentionRows& a, int64_t b, int64_t h, int64_t t, int64_t s) {
  if (a.allowed == nullptr) return s <= t;
  const int64_t* st = a.allowed_strides;
  return a.allowed[b * st[0] + h * st[1] + t * st[2] + s * st[3]];
}

// One query's output from its raw scores [S]: the visible slots' scaled scores, their maximum, the exponentials'
// sum (the sink's term last), then the values weighted in slot order.
void attend_one(const AttentionRows& a, int64_t b, int64_t h, int64_t t, float* scores, const float* values, float* out) {
  float largest = a.sinks != nullptr ? a.sinks[h] : -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int64_t s = 0; s < a.slots; ++s) {
    if (!sees(a, b, h, t, s)) continue;
    float score = scores[s] * a.scale;
    if (a.softcap) score = std::tanh(score / *a.softcap) * *a.softcap;
    scores[s] = score;
    largest = std::max(largest, score);
    any = true;
  }
  std::fill(out, out + a.value_depth, 0.0f);
  if (!any) return;
  float total = 0.0f;
  for (int64_t s = 0; s < a.slots; ++s) {
    if (!sees(a, b, h, t, s)) continue;
    const float weight = std::exp(scores[s] - largest);
    total += weight;
    const float* value = values + s * a.value_depth;
    for (int64_t d = 0; d < a.value_depth; ++d) out[d] += weight * value[d];
  }
  if (a.sinks != nullptr) total += std::exp(a.sinks[h] - largest);
  for (int64_t d = 0; d < a.value_depth; ++d) out[d] /= total;
}

// One head's queries, kQueryChunk at a time: their scores [chunk, S] at once (each a function of its own two rows,
// so the chunking changes no bit), which bounds the scratch memory whatever the prompt's length.
constexpr int64_t kQueryChunk = 32;

void attend_head(const AttentionRows& a, int64_t b, int64_t h, std::vector<float>& scores) {
  const int64_t kv = h / (a.heads / a.kv_heads);
  const float* q = a.q + (b * a.heads + h) * a.tokens * a.depth;
  const float* k = a.k + (b * a.kv_heads + kv) * a.slots * a.depth;
  const float* v = a.v + (b * a.kv_heads + kv) * a.slots * a.value_depth;
  float* out = a.out + (b * a.heads + h) * a.tokens * a.value_depth;
  scores.resize(static_cast<size_t>(std::min(a.tokens, kQueryChunk) * a.slots));
  for (int64_t first = 0; first < a.tokens; first += kQueryChunk) {
    const int64_t count = std::min(kQueryChunk, a.tokens - first);
    device::fixed_order_products(q + first * a.depth, count, k, a.slots, a.depth, scores.data());
    for (int64_t t = first; t < first + count; ++t) {
      attend_one(a, b, h, t, scores.data() + (t - first) * a.slots, v, out + t * a.value_depth);
    }
  }
}

// The shapes fixed_order_attention reads without bounds checks, checked once.
void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                  const at::Tensor& sinks) {
  const bool fits = k.size(0) == q.size(0) && v.size(0) == q.size(0) && v.size(1) == k.size(1) &&
                    v.size(2) == k.size(2) && k.size(3) == q.size(3) && (!sinks.defined() || sinks.numel() == q.size(1));
  if (!fits) {
    fail_input("attention: queries [{}], keys [{}], values [{}] and {} sinks do not fit together", fmt::join(q.sizes(), ", "),
               fmt::join(k.sizes(), ", "), fmt::join(v.sizes(), ", "), sinks.defined() ? sinks.numel() : 0);
  }
  if (allowed.defined() && allowed.scalar_type() != at::kBool) {
    fail_input("attention: the mask must be boolean (true: may see), not {}", c10::toString(allowed.scalar_type()));
  }
}

}  // namespace

bool fixed_order_attention_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const bool needs_grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return q.is_cpu() && k.is_cpu() && v.is_cpu() && q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
         v.scalar_type() == at::kFloat && !needs_grad && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
         k.size(1) > 0 && q.size(1) % k.size(1) == 0;
}

at::Tensor fixed_order_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                                 double scale, const std::optional<double>& softcap, const at::Tensor& sinks) {
  check_shapes(q, k, v, allowed, sinks);
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), slots = k.size(2);
  const at::Tensor queries = q.contiguous(), keys = k.contiguous(), values = v.contiguous();
  const at::Tensor mask = allowed.defined() ? allowed.expand({batch, heads, tokens, slots}) : at::Tensor();
  const at::Tensor sink_logits = sinks.defined() ? sinks.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor out = at::empty({batch, heads, tokens, v.size(3)}, q.options());
  AttentionRows a{queries.data_ptr<float>(), keys.data_ptr<float>(), values.data_ptr<float>(),
                  sink_logits.defined() ? sink_logits.data_ptr<float>() : nullptr, out.data_ptr<float>(),
                  mask.defined() ? mask.data_ptr<bool>() : nullptr, {0, 0, 0, 0}, heads, k.size(1), tokens, slots,
                  q.size(3), v.size(3), static_cast<float>(scale),
                  softcap ? std::optional<float>(static_cast<float>(*softcap)) : std::nullopt};
  if (mask.defined()) {
    for (int i = 0; i < 4; ++i) a.allowed_strides[i] = mask.stride(i);
  }
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t bh = begin; bh < end; ++bh) attend_head(a, bh / heads, bh % heads, scores);
  });
  return out;
}

}  // namespace probekit::model
