// Probes trained by the tools on a fixture model's activations, and the checks of what multi_probe_inference
// prints against the probe files and inspect_model's hidden states; shared by the inference tests.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "capture/capture.h"
#include "common/json.h"
#include "io/safetensors.h"
#include "readout/prompts.h"
#include "tensor_files.h"
#include "test_util.h"

namespace probekit::testing {

/// Captures `layers` (2 and 5 by default) of a small labelled dataset into dir/activations.
inline void capture_activations(const TempDir& tmp, const std::string& model_dir = kGemmaModel,
                                const std::string& layers = "2,5", Site site = Site::kResidPost) {
  write_three_action_dataset(tmp.file("data.jsonl"));
  capture::CaptureOptions o;
  o.model_dir = model_dir;
  o.dataset_path = tmp.file("data.jsonl");
  o.output_dir = tmp.file("activations");
  o.layers = layers;
  o.site = site;
  o.device = "cpu";
  capture::run_capture(o);
}

/// Captures `layers` of a small labelled dataset and trains probes on them with train_binary_probes and `flags`:
/// dir/probes, with one layer_{L} folder each when there are several layers.
inline std::string train_probes(const TempDir& tmp, const std::string& model_dir = kGemmaModel,
                                const std::string& layers = "2,5", Site site = Site::kResidPost,
                                const std::string& flags = "") {
  capture_activations(tmp, model_dir, layers, site);
  CommandResult trained = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 30 --device cpu --quiet {}",
                                                  tool("train_binary_probes"), tmp.file("activations"),
                                                  tmp.file("probes"), flags));
  REQUIRE_MESSAGE(trained.exit_code == 0, trained.output);
  return tmp.file("probes");
}

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
                                            readout::kDefaultPromptSuffix));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return safetensors::File(tmp.file("h.safetensors"));
}

}  // namespace probekit::testing
