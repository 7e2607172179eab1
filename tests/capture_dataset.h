// The capture tests' labelled dataset, their CPU run of kGemmaModel, the activations of a run's files, and a resumed
// run with nothing left to run, shared by the capture tests' files (and the GPU tests').
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

/// Captures layers 1 and 5 of a 16-text dataset with `o` (its model and device) into tmp/out, leaves layer 5's file as a
/// kill between the two layers' finish() leaves it (every example committed to its .partial file, not yet renamed),
/// and checks that --resume finishes it without running a batch.
inline void check_resume_with_nothing_left(capture::CaptureOptions o, const TempDir& tmp) {
  o.dataset_path = write_action_dataset(tmp, 16);
  o.output_dir = tmp.file("out");
  o.layers = "1,5";
  capture::run_capture(o);
  const std::vector<std::vector<float>> expected = layer_activations(o.output_dir, {1, 5});
  const std::string partial = activations::partial_path_for(o.output_dir + "/" + activations::layer_file_name(5));
  rename_path(o.output_dir + "/" + activations::layer_file_name(5), partial);
  write_text(partial + ".progress", "examples_done=16\n");
  o.resume = true;
  const capture::CaptureSummary resumed = capture::run_capture(o);
  CHECK(resumed.processed == 0);
  CHECK(resumed.batches == 0);
  CHECK(layer_activations(o.output_dir, {1, 5}) == expected);
  CHECK_FALSE(path_exists(partial));
}

}  // namespace probekit::testing
