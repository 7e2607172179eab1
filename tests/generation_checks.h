// Checks of generations against the fixtures' references (generation.json, steering.json: transformers' greedy
// generate), shared by the generation and steering tests.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/json.h"
#include "readout/readout.h"
#include "test_util.h"

namespace probekit::testing {

/// The prompts of the cases of a fixture model's generation.json.
inline std::vector<readout::Sequence> fixture_prompts(const std::string& name) {
  const Json reference = read_json_file(fixture_model(name) + "/generation.json");
  std::vector<readout::Sequence> prompts;
  for (const Json& c : reference["cases"]) prompts.push_back(c["prompt_ids"].get<readout::Sequence>());
  return prompts;
}

// A text as one shell word: in single quotes, each ' written as '\''.
inline std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct Steps {
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logits;
};

// One case of generation.json: the same ids, and the top-5 logits within 1e-4 x the step's largest |logit|; at a
// step whose two best reference logits are closer than that, either of the two ids is right and the comparison
// ends there (what follows depends on the choice).
inline void check_case(const std::string& name, size_t index, const Json& reference, const std::vector<int32_t>& ids,
                const Steps& steps) {
  const Json& expected_ids = reference["generated_ids"];
  REQUIRE(ids.size() == expected_ids.size());
  for (size_t s = 0; s < ids.size(); ++s) {
    const Json& top = reference["top5"][s];
    double largest = 0;
    for (const Json& logit : top["logits"]) largest = std::max(largest, std::abs(logit.get<double>()));
    const double tolerance = 1e-4 * largest;
    std::string where = fmt::format("{} case {} step {}", name, index, s);
    for (size_t i = 0; i < 5; ++i) {
      CHECK_MESSAGE(std::abs(steps.top_logits[s][i] - top["logits"][i].get<double>()) <= tolerance, where, ": logit ",
                    i, " is ", steps.top_logits[s][i], ", expected ", top["logits"][i].get<double>());
    }
    const bool near_tie = top["logits"][0].get<double>() - top["logits"][1].get<double>() < tolerance;
    if (near_tie) {
      CHECK_MESSAGE((ids[s] == top["ids"][0].get<int32_t>() || ids[s] == top["ids"][1].get<int32_t>()), where,
                    ": near tie, got id ", ids[s]);
      MESSAGE(where, ": the reference's two best logits are within the tolerance; compared up to here");
      return;
    }
    CHECK_MESSAGE(ids[s] == expected_ids[s].get<int32_t>(), where, ": id ", ids[s], ", expected ", expected_ids[s]);
    for (size_t i = 0; i + 1 < 5; ++i) {
      // Ids are compared where the reference's logits keep them apart.
      bool apart = top["logits"][i].get<double>() - top["logits"][i + 1].get<double>() >= tolerance &&
                   (i == 0 || top["logits"][i - 1].get<double>() - top["logits"][i].get<double>() >= tolerance);
      if (apart) CHECK_MESSAGE(steps.top_ids[s][i] == top["ids"][i].get<int32_t>(), where, ": top id ", i);
    }
  }
}

}  // namespace probekit::testing
