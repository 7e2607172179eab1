// The clean and corrupted runs of a patching experiment: two prompts of one token count, or ROME's noise on the
// subject of one prompt.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "patching/patching.h"

namespace probekit::patching {

namespace {

// "'The' 'Ġcat' ..." of ids[from, from + 8), and "..." after them when more follow.
std::string tokens_from(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& ids, size_t from) {
  const size_t end = std::min(ids.size(), from + 8);
  std::vector<std::string> shown;
  for (size_t i = from; i < end; ++i) shown.push_back("'" + tokenizer.id_to_token(ids[i]) + "'");
  if (shown.empty()) return "(nothing)";
  return fmt::format("{}{}", fmt::join(shown, " "), end < ids.size() ? " ..." : "");
}

// The positions (in the ids encode(text, true) gives) of the tokens that spell `subject`'s first occurrence in text.
std::vector<int64_t> subject_positions(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                       const std::string& text, const std::string& subject) {
  const size_t start = subject.empty() ? std::string::npos : text.find(subject);
  if (start == std::string::npos) fail_usage("--subject \"{}\" does not occur in the clean prompt \"{}\"", subject, text);
  const size_t end = start + subject.size();
  // The ids without special tokens lie inside those with them (after a BOS, say): find where.
  const std::vector<int32_t> plain = tokenizer.encode(text, false);
  const auto found = std::search(ids.begin(), ids.end(), plain.begin(), plain.end());
  if (plain.empty() || found == ids.end()) fail_input("the tokens of \"{}\" without special tokens are not among its tokens with them", text);
  const auto shift = static_cast<int64_t>(found - ids.begin());
  const std::vector<std::pair<size_t, size_t>> spans = tokenizer.token_spans(plain, text);
  std::vector<int64_t> positions;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].first < end && spans[i].second > start) positions.push_back(static_cast<int64_t>(i) + shift);
  }
  return positions;
}

}  // namespace

PromptPair prompt_pair(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                       const std::string& clean, const std::string& corrupted) {
  PromptPair pair;
  pair.clean = tokenizer.encode(clean, true);
  pair.corrupted = tokenizer.encode(corrupted, true);
  if (pair.clean.size() != pair.corrupted.size()) {
    const auto differ = static_cast<size_t>(
        std::mismatch(pair.clean.begin(), pair.clean.begin() + static_cast<int64_t>(std::min(pair.clean.size(), pair.corrupted.size())),
                      pair.corrupted.begin())
            .first -
        pair.clean.begin());
    fail_usage("the clean and corrupted prompts must have the same number of tokens: the clean one has {}, the corrupted "
               "one {}; they differ from token {}: clean {}, corrupted {}",
               pair.clean.size(), pair.corrupted.size(), differ, tokens_from(tokenizer, pair.clean, differ),
               tokens_from(tokenizer, pair.corrupted, differ));
  }
  if (pair.clean.empty()) fail_usage("the clean prompt has no tokens");
  model.check_inputs(pair.clean);
  model.check_inputs(pair.corrupted);
  return pair;
}

void check_noise(const NoiseCorruption& noise) {
  if (!(noise.scale > 0) || !std::isfinite(noise.scale)) fail_usage("--noise {}: must be a finite number above 0", noise.scale);
}

PromptPair noised_pair(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                       const std::string& clean, const NoiseCorruption& noise) {
  check_noise(noise);
  PromptPair pair;
  pair.clean = pair.corrupted = tokenizer.encode(clean, true);
  if (pair.clean.empty()) fail_usage("the clean prompt has no tokens");
  model.check_inputs(pair.clean);
  pair.noised_positions = subject_positions(tokenizer, pair.clean, clean, noise.subject);
  if (pair.noised_positions.empty()) fail_usage("--subject \"{}\" spans no token of the clean prompt", noise.subject);
  pair.noise_std = noise.scale * model.embedding_std();
  const int64_t hidden = model.config().hidden_size;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(noise.seed);
  at::Tensor values = at::zeros({static_cast<int64_t>(pair.clean.size()), hidden}, at::kFloat);
  for (int64_t position : pair.noised_positions) {
    values[position].copy_(at::randn({hidden}, generator, at::kFloat) * pair.noise_std);
  }
  pair.noise = values.to(model.device());
  return pair;
}

}  // namespace probekit::patching
