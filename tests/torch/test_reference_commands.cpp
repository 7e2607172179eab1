// The reference's README and training-script commands, run unchanged as processes but for their paths and layer
// numbers (the fixture model has 6 layers): capture, binary and multiclass training, inference without --model
// and over several layers. docs/reference_commands.md lists them beside ours.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "common/files.h"
#include "common/json.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// Runs one of our tools with the reference's arguments; returns its output (stdout and stderr).
std::string run_reference_command(const std::string& name, const std::string& arguments) {
  CommandResult r = run_command(tool(name) + " " + arguments);
  INFO(name << " " << arguments);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return r.output;
}

}  // namespace

TEST_CASE("the reference's README commands run unchanged against a fixture model, but for paths and layers") {
  TempDir tmp;
  std::string dataset = tmp.file("data.jsonl"), activations = tmp.file("activations");
  probekit::testing::write_three_action_dataset(dataset);  // 3 of the reference's 45 actions
  std::string captured = run_reference_command(
      "capture_activations",
      fmt::format("--model {} --dataset {} --output-dir {} --layers 2 3 --format hdf5", kGemmaModel, dataset, activations));
  CHECK(is_regular_file(activations + "/layer_2_activations.h5"));
  CHECK(is_regular_file(activations + "/layer_3_activations.h5"));
  CHECK_CONTAINS(captured, "3 of the reference's 45 cognitive actions occur");

  std::string binary = run_reference_command(
      "train_binary_probes",
      fmt::format("--activations {}/layer_3_activations.h5 --output-dir {} --model-type linear --batch-size 18 --epochs 3 "
                  "--lr 5e-4 --weight-decay 1e-3 --early-stopping-patience 10 --num-workers 8 --pin-activations-to-gpu",
                  activations, tmp.file("probes")));
  CHECK_CONTAINS(binary, "42 labels have no example and get no probe");
  // Results on stdout, as every tool prints them (regression: the trainers printed them only with --json).
  CHECK_CONTAINS(binary, "Trained probes at layer 3 in ");
  CHECK_CONTAINS(binary, "  layer  probes  test AUROC  F1 at 0.5  F1 tuned  skipped  seconds\n      3       3      0.");
  CHECK_CONTAINS(binary, "42 labels without an example got no probe");
  CHECK_CONTAINS(binary, "Report: " + tmp.file("probes") + "/report.html");
  CHECK(read_json_file(tmp.file("probes/probes.json")).at("probes").size() == 3);
  // Its training script: every layer file of a capture, the activations kept in host memory.
  std::string all = run_reference_command(
      "train_binary_probes", fmt::format("--activations {} --output-dir {} --model-type linear --batch-size 18 --epochs 3 "
                                         "--early-stopping-patience 10 --no-pin-activations",
                                         activations, tmp.file("probes_all")));
  CHECK_CONTAINS(all, "Trained probes at 2 layers in ");
  CHECK_CONTAINS(all, "  best layer by mean test AUROC: ");
  std::string multiclass = run_reference_command("train_probes",
                        fmt::format("--activations {}/layer_3_activations.h5 --output-dir {} --model-type linear "
                                    "--batch-size 32 --epochs 3 --lr 1e-3 --weight-decay 1e-4",
                                    activations, tmp.file("multiclass")));
  CHECK_CONTAINS(multiclass, "Trained a 45-class probe at layer 3 in ");
  CHECK_CONTAINS(multiclass, "  test accuracy 0.");

  // No --model: the probes know it.
  std::string ranked =
      run_reference_command("multi_probe_inference", fmt::format("--probes-dir {} --text \"{}\"", tmp.file("probes"), kReframingText));
  CHECK_CONTAINS(ranked, "Detected labels (top 5):");
  std::string layers = run_reference_command(
      "multi_probe_inference", fmt::format("--probes-dir {} --layers 2 3 --text \"{}\"", tmp.file("probes_all"), kReframingText));
  CHECK_CONTAINS(layers, "predictions across all layers");
  CHECK_CONTAINS(layers, "(L 2)");  // the top 5 of 3 labels x 2 layers hold both layers
  CHECK_CONTAINS(layers, "(L 3)");
  std::string classes = run_reference_command(
      "multi_probe_inference", fmt::format("--probes-dir {} --text \"{}\"", tmp.file("multiclass"), kReframingText));
  CHECK_CONTAINS(classes, "Predicted classes (top 5 of 45, softmax probabilities):");
}
