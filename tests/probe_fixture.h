// Probes trained for a test on a fixture model's activations of write_three_action_dataset's texts: one builder for
// the inference, server, steering and GPU tests, each suite's settings (layers, site, position, epochs, kind) its
// options; and the engine and training-run options the tests build around such probes.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "capture/capture.h"
#include "capture_runs.h"
#include "common/files.h"
#include "inference/engine.h"
#include "probes/binary_run.h"
#include "probes/synthetic_activations.h"
#include "test_util.h"

namespace probekit::testing {

/// What a test's probes are trained on and how; the defaults are the inference tests' probes.
struct ProbeFixture {
  std::string model_dir = kGemmaModel;
  std::string layers = "2,5";  // with several, one layer_{L} folder of probes each
  Site site = Site::kResidPost;
  Position position = Position::kLast;
  int64_t epochs = 30;
  std::string flags;              // more train_binary_probes flags: --model-type, --heads, --C
  std::string output = "probes";  // the probes' folder in the test's TempDir
  bool in_process = false;        // run_binary_training in the test's process: the GPU suite builds no tools
};

/// A train_binary_probes run of `activations` into `output` on the CPU for `epochs` epochs, the rest its defaults.
inline probes::BinaryRunOptions cpu_binary_run(const std::string& activations, const std::string& output,
                                               int64_t epochs) {
  probes::BinaryRunOptions run;
  run.activations = {activations};
  run.output_dir = output;
  run.device = "cpu";
  run.training.epochs = epochs;
  return run;
}

/// Captures the fixture's layers of 60 texts on the CPU into tmp/activations, unless a fixture of the same TempDir
/// did already: a test training several kinds trains them on one capture.
inline void capture_fixture_activations(const TempDir& tmp, const ProbeFixture& fixture = {}) {
  if (path_exists(tmp.file("activations"))) return;
  capture::CaptureOptions o = three_action_capture(tmp, 60, "cpu");
  o.model_dir = fixture.model_dir;
  o.output_dir = tmp.file("activations");
  o.layers = fixture.layers;
  o.site = fixture.site;
  o.position = fixture.position;
  capture::run_capture(o);
}

/// Captures (capture_fixture_activations) and trains binary probes with train_binary_probes into tmp/<output>.
inline std::string train_fixture_probes(const TempDir& tmp, const ProbeFixture& fixture = {}) {
  capture_fixture_activations(tmp, fixture);
  const std::string output = tmp.file(fixture.output);
  if (fixture.in_process) {
    REQUIRE_MESSAGE(fixture.flags.empty(), "flags are for the tool: ", fixture.flags);
    probes::run_binary_training(cpu_binary_run(tmp.file("activations"), output, fixture.epochs));
    return output;
  }
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs {} --device cpu --quiet {}",
                                            tool("train_binary_probes"), tmp.file("activations"), output,
                                            fixture.epochs, fixture.flags));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return output;
}

/// Attention probes on layer 2 captured at every token (the attention tests'), trained `epochs` epochs.
inline ProbeFixture attention_fixture(int64_t epochs, const std::string& flags = "") {
  ProbeFixture fixture;
  fixture.layers = "2";
  fixture.position = Position::kAll;
  fixture.epochs = epochs;
  fixture.flags = "--model-type attention " + flags;
  return fixture;
}

/// A --position all file of 32-wide tokens, 20 to 60 per text, in tmp: a "marker" text (200/50/50 per split) holds
/// one token of noise + 6 d at a uniformly drawn place; a "plain" text is noise only.
inline activations::ActivationFile marker_activations(const TempDir& tmp) {
  probes::SyntheticActivations spec = probes::uniform_synthetic(2, {200, 50, 50}, 32);
  spec.label_names = {"marker", "plain"};
  spec.signal = {6.0, 0.0};
  spec.min_tokens = 20;
  spec.max_tokens = 60;
  const std::string path = tmp.file("layer_0_activations.h5");
  probes::write_synthetic_activation_file(path, spec);
  return activations::read_activation_file(path);
}

/// An engine's options for kGemmaModel and the probes in `probes_dir`, on the CPU.
inline inference::EngineOptions cpu_engine_options(const std::string& probes_dir) {
  inference::EngineOptions options;
  options.model_dir = kGemmaModel;
  options.probes_dir = probes_dir;
  options.device = "cpu";
  return options;
}

}  // namespace probekit::testing
