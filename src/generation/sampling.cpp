#include "generation/sampling.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/counter_random.h"
#include "common/error.h"

namespace probekit::generation {

void check_sampling(const Sampling& s) {
  if (!(std::isfinite(s.temperature) && s.temperature >= 0)) {
    fail_usage("--temperature must be 0 (greedy) or positive, got {}", s.temperature);
  }
  if (s.top_k < 0) fail_usage("--sample-top-k must be 0 (all) or positive, got {}", s.top_k);
  if (!(s.top_p >= 0 && s.top_p <= 1)) fail_usage("--top-p must be from 0 to 1, got {}", s.top_p);
}

at::Tensor scaled_logits(const at::Tensor& logits, double temperature) {
  // Shifted so that each row's largest logit is 0 before the division: the others become negative numbers or -inf,
  // never +inf, so the softmax stays finite however small the temperature (logits / 1e-40 overflowed to inf and
  // the softmax turned to NaN). The largest is left at 0 rather than divided: 0 / T would be NaN where T rounds
  // to 0 in fp32, as every T below about 1e-45 does; there, as T goes to 0, only the largest logits keep weight.
  at::Tensor shifted = logits - std::get<0>(logits.max(-1, /*keepdim=*/true));
  return at::where(shifted < 0, shifted / temperature, at::zeros_like(shifted));
}

TokenSampler::TokenSampler(const Sampling& sampling, uint64_t first_row, std::vector<uint64_t> row_keys)
    : sampling_(sampling), first_row_(first_row), row_keys_(std::move(row_keys)) {
  check_sampling(sampling);
}

at::Tensor TokenSampler::choose(const at::Tensor& logits) {
  const uint64_t step = step_++;
  if (sampling_.temperature == 0) return logits.argmax(-1);
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  // Most probable first; top-k and top-p then cut the sorted rows from the end.
  auto [sorted, order] = scaled_logits(logits, sampling_.temperature).sort(-1, /*descending=*/true);
  if (sampling_.top_k > 0 && sampling_.top_k < vocab) {
    // transformers keeps every token whose logit equals the k-th largest.
    at::Tensor kth = sorted.narrow(1, sampling_.top_k - 1, 1);
    sorted = sorted.masked_fill(sorted < kth, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probabilities = at::softmax(sorted, -1);
  if (sampling_.top_p < 1.0) {
    // A token stays when the tokens before it hold less than p, and the most probable always stays (p = 0 keeps it
    // alone, as transformers' min_tokens_to_keep does).
    at::Tensor dropped = (probabilities.cumsum(-1) - probabilities) >= sampling_.top_p;
    dropped.select(1, 0).fill_(false);
    probabilities = probabilities.masked_fill(dropped, 0.0);
  }
  at::Tensor cumulative = probabilities.cumsum(-1);
  std::vector<double> draws(static_cast<size_t>(batch));
  if (!row_keys_.empty() && row_keys_.size() != draws.size()) {
    throw std::logic_error(fmt::format("{} row keys for a batch of {} rows", row_keys_.size(), draws.size()));
  }
  for (size_t b = 0; b < draws.size(); ++b) {
    const uint64_t row = row_keys_.empty() ? first_row_ + b : row_keys_[b];
    draws[b] = draw_uniform(draw_bits(sampling_.seed, row), step);
  }
  // Inverse transform sampling: the first token whose cumulative probability passes the draw (scaled to the
  // kept mass); the last kept token when rounding leaves the draw above every sum.
  at::Tensor target = at::tensor(draws, at::kDouble).to(logits.device(), at::kFloat).unsqueeze(1) *
                      cumulative.narrow(1, vocab - 1, 1);
  at::Tensor index = (cumulative <= target).sum(-1, /*keepdim=*/true);
  at::Tensor last_kept = (probabilities > 0).sum(-1, true) - 1;
  index = at::minimum(index, last_kept).clamp_min(0);
  return order.gather(1, index).squeeze(1);
}

}  // namespace probekit::generation
