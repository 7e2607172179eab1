// Probes trained on conversations, for the tests that need them: a dataset of 24 two-turn chats (a question, and a
// reply naming its label), its capture on the Gemma 3 fixture's layer 2, and probes trained on it.
#pragma once

#include <fmt/format.h>

#include <string>

#include "capture/capture.h"
#include "common/json.h"
#include "probes/binary_run.h"
#include "probe_fixture.h"
#include "probes/probe_kind.h"
#include "test_paths.h"
#include "test_util.h"

namespace probekit::testing {

inline const char* const kConversationLabels[] = {"calm", "curious", "tense"};

// 8 conversations of each label: a user question and an assistant reply that names the label.
inline std::string write_conversations(const TempDir& tmp) {
  std::string lines;
  for (int i = 0; i < 24; ++i) {
    const char* label = kConversationLabels[i % 3];
    Json messages = Json::array({{{"role", "user"}, {"content", fmt::format("Question number {} about the day", i)}},
                                 {{"role", "assistant"}, {"content", fmt::format("I feel {} today, {} times over", label, i)}}});
    lines += Json({{"messages", messages}, {"label", label}}).dump() + "\n";
  }
  std::string path = tmp.file("chats.jsonl");
  write_text(path, lines);
  return path;
}

inline capture::CaptureOptions conversation_capture(const TempDir& tmp, Position position, const std::string& out) {
  capture::CaptureOptions o;
  o.model_dir = kGemmaModel;
  o.dataset_path = write_conversations(tmp);
  o.dataset.label_field = "label";
  o.device = "cpu";
  o.layers = "2";
  o.position = position;
  o.output_dir = tmp.file(out);
  return o;
}

// Captures `o` and trains probes of `kind` on it, 3 epochs, into `output`: the options of an engine on them (CPU).
inline inference::EngineOptions train_conversation_probes(const capture::CaptureOptions& o, const std::string& output,
                                                          const char* kind) {
  capture::run_capture(o);
  probes::BinaryRunOptions run;
  run.activations = {o.output_dir};
  run.output_dir = output;
  run.device = "cpu";
  run.training.epochs = 3;
  run.training.kind = &probes::probe_kind(kind);
  run.kinds = {run.training.kind};
  probes::run_binary_training(run);
  return cpu_engine_options(output);
}

}  // namespace probekit::testing
