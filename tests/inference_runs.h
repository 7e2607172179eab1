// The checks of what multi_probe_inference prints against the probe files (probe_fixture.h trains them) and
// inspect_model's hidden states; shared by the inference tests.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "common/json.h"
#include "io/safetensors.h"
#include "activations/readout_recipe.h"
#include "readout/prompts.h"
#include "tensor_files.h"
#include "test_util.h"

namespace probekit::testing {

/// The JSON that multi_probe_inference --json printed, after the log lines.
inline Json printed_json(const CommandResult& r) { return Json::parse(r.output.substr(r.output.find('{'))); }

/// Every printed confidence equals sigmoid(w.h + b) of the probe files in `probe_dir` for the row h.
inline void check_printed_scores(const Json& printed, const std::string& probe_dir, const at::Tensor& h) {
  REQUIRE(printed["predictions"].size() >= 1);
  for (const Json& p : printed["predictions"]) {
    safetensors::File probe(fmt::format("{}/probe_{}.safetensors", probe_dir, p["label"].get<std::string>()));
    at::Tensor w = read_tensor(probe, probe.at("linear.weight")).to(at::kDouble)[0];
    double b = read_tensor(probe, probe.at("linear.bias")).to(at::kDouble)[0].item<double>();
    double expected = 1.0 / (1.0 + std::exp(-((w * h.to(at::kDouble)).sum().item<double>() + b)));
    CHECK_MESSAGE(std::fabs(p["confidence"].get<double>() - expected) < 1e-5, p["label"].get<std::string>());
  }
}

/// Writes the hidden states of kReframingText + the prompt suffix with inspect_model hidden and opens the file.
inline safetensors::File inspect_hidden(const TempDir& tmp, const std::string& model_dir) {
  CommandResult r = run_command(fmt::format("{} hidden --model {} --device cpu --output {} --text \"{}{}\"",
                                            tool("inspect_model"), model_dir, tmp.file("h.safetensors"), kReframingText,
                                            activations::kDefaultPromptSuffix));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return safetensors::File(tmp.file("h.safetensors"));
}

}  // namespace probekit::testing
