// Choosing the next token from the logits: greedy, or sampled with a temperature, top-k and top-p (nucleus)
// applied in transformers' order. All on the logits' device; the random numbers are drawn on the host, each a pure
// function of (seed, row, step) (common/counter_random.h), so a seed gives the same tokens on every device, and a
// prompt the same tokens however the prompts are batched, streamed or monitored.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace probekit::generation {

struct Sampling {
  double temperature = 0.0;  // 0: greedy (the largest logit; the first of equal ones)
  int64_t top_k = 0;         // keep the k most probable tokens; 0: all
  double top_p = 1.0;        // keep the fewest most probable tokens whose probabilities reach p; 1: all
  uint64_t seed = 0;
};

/// Throws a usage error naming the flag for a temperature below 0, top-k below 0 or top-p outside (0, 1].
void check_sampling(const Sampling& sampling);

/// logits / temperature shifted by each row's largest logit ([B, vocab], that logit at 0): the same softmax, and a
/// finite one for every positive temperature, however small; -inf logits stay -inf.
at::Tensor scaled_logits(const at::Tensor& logits, double temperature);

class TokenSampler {
 public:
  /// Row b of each call's logits is row `first_row` + b of the generation (its prompt's index among all prompts), or
  /// row `row_keys[b]` when they are given.
  explicit TokenSampler(const Sampling& sampling, uint64_t first_row = 0, std::vector<uint64_t> row_keys = {});
  /// The next token of each row [B] (int64, on the logits' device) from logits [B, vocab] in fp32; each call is the
  /// next step.
  at::Tensor choose(const at::Tensor& logits);

 private:
  Sampling sampling_;
  uint64_t first_row_;
  std::vector<uint64_t> row_keys_;
  uint64_t step_ = 0;
};

}  // namespace probekit::generation
