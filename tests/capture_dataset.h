// The capture tests' labelled dataset, their CPU run of kGemmaModel, and the activations of a run's files, shared by
// the capture tests' two files.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "common/json.h"
#include "test_util.h"

namespace probekit::testing {

inline const std::vector<std::string> kActionLabels = {"analyzing", "reframing", "noticing", "questioning"};

/// A small labelled dataset of `count` texts of varied lengths (so batches are padded), labels kActionLabels in
/// turn, written to tmp/`name`.
inline std::string write_action_dataset(const TempDir& tmp, int count, const std::string& name = "data.jsonl") {
  static const char* words[] = {"the", "plan", "failed", "so", "I", "looked", "again", "at", "every", "step",
                                "and", "wondered", "what", "else", "could", "explain", "it", "today"};
  std::string lines;
  for (int i = 0; i < count; ++i) {
    std::string text = kActionLabels[static_cast<size_t>(i % 4)];
    for (int w = 0; w < 3 + (i * 7) % 19; ++w) text += std::string(" ") + words[(i * 5 + w * 3) % 18];
    lines += Json({{"text", text}, {"cognitive_action", kActionLabels[static_cast<size_t>(i % 4)]}, {"domain", fmt::format("d{}", i % 3)}}).dump() + "\n";
  }
  std::string path = tmp.file(name);
  probekit::testing::write_text(path, lines);
  return path;
}

/// Captures kGemmaModel on the CPU from `dataset` into `out`.
inline capture::CaptureOptions cpu_capture_options(const std::string& dataset, const std::string& out) {
  capture::CaptureOptions o;
  o.model_dir = kGemmaModel;
  o.dataset_path = dataset;
  o.output_dir = out;
  o.device = "cpu";
  return o;
}

/// Activations of every split of every layer file, for byte-for-byte comparison.
inline std::vector<std::vector<float>> layer_activations(const std::string& dir, const std::vector<int64_t>& layers) {
  std::vector<std::vector<float>> out;
  for (int64_t layer : layers) {
    auto file = activations::read_activation_file(dir + "/" + activations::layer_file_name(layer));
    for (activations::Split split : activations::kSplits) out.push_back(file.split(split).activations);
  }
  return out;
}

}  // namespace probekit::testing
