// Comparing two inference engines over the same probes (a model split over devices against one device): the
// same rankings, per-token scores and generations, bitwise.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "generation/generator.h"
#include "inference/engine.h"

namespace probekit::testing {

/// Every token `engine` generates greedily after `prompts` in one batch, `new_tokens` each (--no-stop), with its
/// scores, in the order they came.
inline std::vector<inference::ScoredToken> generated_tokens(const inference::Engine& engine,
                                                            const std::vector<std::string>& prompts, int64_t new_tokens) {
  generation::GenerationOptions options;
  options.max_new_tokens = new_tokens;
  options.suppressed_ids = generation::read_stop_ids(engine.model_dir());
  std::vector<inference::ScoredToken> tokens;
  engine.generate(prompts, options, [&](const inference::ScoredToken& token) {
    tokens.push_back(token);
    return true;
  });
  return tokens;
}

/// `found` ranks `texts` and scores every token of the first with bitwise the probabilities of `expected`.
inline void check_same_scores(const inference::Engine& found, const inference::Engine& expected,
                              const std::vector<std::string>& texts) {
  std::vector<inference::TextScores> a = found.score(texts), b = expected.score(texts);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(a[i].probability == b[i].probability, "text ", i);
  CHECK(found.score_tokens(texts.front()).probability == expected.score_tokens(texts.front()).probability);
}

/// `found` generates after `prompts` the tokens of `expected`, each with bitwise its probe scores.
inline void check_same_generation(const inference::Engine& found, const inference::Engine& expected,
                                  const std::vector<std::string>& prompts, int64_t new_tokens) {
  std::vector<inference::ScoredToken> a = generated_tokens(found, prompts, new_tokens);
  std::vector<inference::ScoredToken> b = generated_tokens(expected, prompts, new_tokens);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK_MESSAGE((a[i].row == b[i].row && a[i].index == b[i].index && a[i].id == b[i].id), "token ", i);
    CHECK_MESSAGE(a[i].probability == b[i].probability, "row ", a[i].row, " token ", a[i].index);
  }
}

}  // namespace probekit::testing
