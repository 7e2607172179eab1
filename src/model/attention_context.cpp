// What attention knows about the positions of one forward pass (decoder_block.h): the rotary tables of each rope
// (with the scalings transformers applies to its frequencies) and the masks of each window, over a padded batch, a
// cached prefix, generation's cache or packed sequences.
#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/decoder_block.h"

namespace probekit::model {

namespace {

// YaRN's frequencies from the unscaled ones' denominators base ** (arange(0, dim, 2) / dim), as transformers'
// _compute_yarn_parameters: a ramp over the frequency index from the dimension that turns beta_fast times over the
// pretrained context (kept as they are) to the one that turns beta_slow times (divided by factor).
at::Tensor yarn_inverse_frequencies(const RopeSpec& rope, const at::Tensor& denominators) {
  const double dim = static_cast<double>(rope.rotary_dim);
  const double context = static_cast<double>(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(context / (rotations * 2.0 * M_PI)) / (2.0 * std::log(rope.theta));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  at::Tensor ramp = ((at::arange(rope.rotary_dim / 2, denominators.options()) - low) / (high - low)).clamp(0, 1);
  at::Tensor extrapolation = 1 - ramp;
  return (1.0 / (denominators * rope.factor)) * (1 - extrapolation) + (1.0 / denominators) * extrapolation;
}

}  // namespace

at::Tensor rotary_inverse_frequencies(const RopeSpec& rope, at::Device device, bool long_sequence) {
  auto options = at::TensorOptions().device(device);
  // transformers: 1 / base ** (arange(0, dim, 2) / dim), in fp32.
  at::Tensor exponents = at::arange(0, rope.rotary_dim, 2, options.dtype(at::kLong)).to(at::kFloat) /
                         static_cast<double>(rope.rotary_dim);
  if (rope.type == RopeType::kLongRope) {
    // transformers: 1 / (factors * base ** (arange(0, dim, 2) / dim)), the factors rounded to fp32 first.
    const std::vector<double>& factors = long_sequence ? rope.long_factors : rope.short_factors;
    return 1.0 / (at::tensor(factors, at::kDouble).to(options.dtype(at::kFloat)) * at::pow(rope.theta, exponents));
  }
  if (rope.type == RopeType::kYarn) return yarn_inverse_frequencies(rope, at::pow(rope.theta, exponents));
  if (rope.type == RopeType::kProportional) {
    // transformers: the first int(fraction * dim // 2) frequencies 1 / base ** (2i / dim), the rest 0; all / factor.
    const auto turning = static_cast<int64_t>(rope.rotated_fraction * static_cast<double>(rope.rotary_dim) / 2.0);
    at::Tensor inverse = at::zeros({rope.rotary_dim / 2}, options.dtype(at::kFloat));
    inverse.narrow(0, 0, turning).copy_(1.0 / at::pow(rope.theta, exponents.narrow(0, 0, turning)));
    return inverse / rope.factor;
  }
  at::Tensor inverse = 1.0 / at::pow(rope.theta, exponents);
  if (rope.type == RopeType::kLinear) return inverse / rope.factor;
  if (rope.type == RopeType::kLlama3) {
    const double old_context = static_cast<double>(rope.original_max_position_embeddings);
    const double low_wavelength = old_context / rope.low_freq_factor;
    const double high_wavelength = old_context / rope.high_freq_factor;
    at::Tensor wavelength = (2.0 * M_PI) / inverse;
    at::Tensor scaled = at::where(wavelength > low_wavelength, inverse / rope.factor, inverse);
    at::Tensor smooth = (old_context / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
    at::Tensor medium = (wavelength < high_wavelength).logical_not() * (wavelength > low_wavelength).logical_not();
    return at::where(medium, smoothed, scaled);
  }
  return inverse;
}

AttentionContext::AttentionContext(const ModelConfig& config, const at::Tensor& positions, const KvCache* prefix,
                                   const at::Tensor& prefix_lengths, const at::Tensor& sequence_lengths,
                                   const PackedSequences* packed)
    : config_(config), positions_(positions), prefix_lengths_(prefix_lengths), sequence_lengths_(sequence_lengths),
      prefix_(prefix), packed_(packed) {
  if (packed != nullptr && prefix != nullptr) fail_input("packed sequences cannot attend to a cached prefix");
  if (prefix != nullptr) {
    for (const at::Tensor& keys : prefix->keys) {
      if (keys.defined()) {
        prefix_tokens_ = keys.size(2);
        break;
      }
    }
  }
}

void AttentionContext::use_cache(KvCache& cache, int64_t visible, const at::Tensor& commit_tokens) {
  if (prefix_ != nullptr || packed_ != nullptr) {
    fail_input("a forward pass takes a generation cache alone, without a shared prefix or packed sequences");
  }
  cache_ = &cache;
  cache_visible_ = visible;
  commit_tokens_ = commit_tokens;
}

at::Tensor AttentionContext::inverse_frequencies(const RopeSpec& rope) const {
  if (rope.type != RopeType::kLongRope) return rotary_inverse_frequencies(rope, positions_.device());
  // transformers picks the short or the long factors for a whole forward pass by its length; each row here
  // chooses by its own, as it would run alone, so that batching never changes a row.
  at::Tensor lengths = sequence_lengths_.defined() ? sequence_lengths_ : positions_.select(1, -1) + 1;
  at::Tensor is_long = (lengths > rope.original_max_position_embeddings).view({-1, 1, 1});
  return at::where(is_long, rotary_inverse_frequencies(rope, positions_.device(), true),
                   rotary_inverse_frequencies(rope, positions_.device(), false));
}

const std::pair<at::Tensor, at::Tensor>& AttentionContext::rotary(const RopeSpec& rope) {
  for (const auto& entry : rotary_) {
    if (entry.first == rope) return entry.second;
  }
  at::Tensor frequencies = positions_.to(at::kFloat).unsqueeze(-1) * inverse_frequencies(rope);  // [B, T, rotary_dim / 2]
  at::Tensor angles = at::cat({frequencies, frequencies}, -1).unsqueeze(1);  // [B, 1, T, rotary_dim]
  at::Tensor cos = angles.cos(), sin = angles.sin();
  if (rope.attention_factor != 1.0) {
    cos = cos * rope.attention_factor;
    sin = sin * rope.attention_factor;
  }
  rotary_.emplace_back(rope, std::make_pair(cos, sin));
  return rotary_.back().second;
}

const at::Tensor& AttentionContext::mask(int64_t sliding_window) {
  auto cached = masks_.find(sliding_window);
  if (cached != masks_.end()) return cached->second;
  const int64_t tokens = positions_.size(1);
  at::Tensor& mask = masks_[sliding_window];
  auto options = at::TensorOptions().device(positions_.device());
  if (cache_ != nullptr) {
    // Slot j holds position j: each token sees the slots up to its own position (within the window).
    at::Tensor slots = at::arange(cache_visible_, options.dtype(at::kLong)).view({1, 1, cache_visible_});
    at::Tensor query_positions = positions_.unsqueeze(-1);  // [B, T, 1]
    at::Tensor seen = slots <= query_positions;
    if (sliding_window > 0) seen = seen & ((query_positions - slots) < sliding_window);
    mask = seen.unsqueeze(1);  // [B, 1, T, visible]
    return mask;
  }
  // Without a prefix, positions are 0..T-1 and right padding never precedes a real token, so plain causal
  // attention is exact whenever the window cannot cut anything off. Packed sequences take no mask.
  if (packed_ != nullptr || (prefix_ == nullptr && (sliding_window == 0 || tokens <= sliding_window))) return mask;

  at::Tensor query_positions = positions_.unsqueeze(-1);  // [B, T, 1]
  at::Tensor own_index = at::arange(tokens, options.dtype(at::kLong));
  at::Tensor own = (own_index.unsqueeze(0) <= own_index.unsqueeze(1)).unsqueeze(0);  // [1, T, T]
  if (sliding_window > 0) own = own & ((query_positions - positions_.unsqueeze(1)) < sliding_window);
  if (prefix_ != nullptr) {
    const int64_t prefix_tokens = prefix_tokens_;
    at::Tensor prefix_positions = at::arange(prefix_tokens, options.dtype(at::kLong)).view({1, 1, prefix_tokens});
    at::Tensor seen = prefix_positions < prefix_lengths_.view({-1, 1, 1});  // [B, 1, P]
    if (sliding_window > 0) seen = seen & ((query_positions - prefix_positions) < sliding_window);
    seen = seen.expand({positions_.size(0), tokens, prefix_tokens});
    own = at::cat({seen, own.expand({positions_.size(0), tokens, tokens})}, -1);
  }
  mask = own.expand({positions_.size(0), tokens, own.size(-1)}).unsqueeze(1).contiguous();
  return mask;
}

}  // namespace probekit::model
