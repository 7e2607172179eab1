// Probe training at its edges (regressions from a review of the trainers): which first tokens pooling and every-token
// probes leave out, as the capture recorded them; empty splits; flags that cannot apply; outputs that would delete
// their inputs; summaries of layers whose figures are undefined.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "common/error.h"
#include "common/json.h"
#include "probes/binary_run.h"
#include "probes/multiclass_trainer.h"
#include "probes/run_summary.h"
#include "probes/synthetic_activations.h"
#include "probes/training_data.h"
#include "probe_fixture.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// 12 texts that all start with the same word, two labels, captured at every token of layer 1 with `model`.
std::string capture_same_start(const TempDir& tmp, const std::string& model, const std::string& out) {
  std::string lines;
  for (int i = 0; i < 12; ++i) {
    lines += Json({{"text", fmt::format("The day number {} went {}", i, i % 2 == 0 ? "well" : "badly")},
                   {"label", i % 2 == 0 ? "good" : "bad"}}).dump() + "\n";
  }
  write_text(tmp.file("same_start.jsonl"), lines);
  capture::CaptureOptions o;
  o.model_dir = model;
  o.dataset_path = tmp.file("same_start.jsonl");
  o.dataset.label_field = "label";
  o.device = "cpu";
  o.layers = "1";
  o.position = Position::kAll;
  o.prompt_suffix = "";
  o.output_dir = tmp.file(out);
  capture::run_capture(o);
  return tmp.file(out + "/layer_1_activations.h5");
}

std::string synthetic_file(const TempDir& tmp, std::array<int64_t, 3> examples, const std::string& name,
                           int64_t layer = 0) {
  probes::SyntheticActivations spec = probes::uniform_synthetic(3, examples, 8);
  spec.layer = layer;
  const std::string path = tmp.file(name);
  probes::write_synthetic_activation_file(path, spec);
  return path;
}

}  // namespace

TEST_CASE("the leading special tokens pooling leaves out are the tokenizer's, as the capture recorded them") {
  TempDir tmp;
  // GPT-2 puts no BOS in front: texts that all start with "The" keep it (regression: a first token every text shared
  // was taken for a BOS, and --pool mean left a word out that inference reads).
  const activations::ActivationFile gpt2 = activations::read_activation_file(capture_same_start(tmp, fixture_model("gpt2"), "gpt2"));
  CHECK(gpt2.attributes.recipe.leading_specials == 0);
  CHECK(probes::leading_specials(gpt2) == 0);
  const activations::ActivationFile gemma = activations::read_activation_file(capture_same_start(tmp, kGemmaModel, "gemma"));
  CHECK(gemma.attributes.recipe.leading_specials == 1);
  CHECK(probes::leading_specials(gemma) == 1);
  // Pooled means over every token of a GPT-2 text, the first included.
  const activations::SplitData& all = gpt2.split(activations::Split::kTrain);
  const activations::ActivationFile pooled = probes::pooled_rows(gpt2, Position::kMean);
  const at::Tensor rows = at::from_blob(const_cast<float*>(all.activations.data()), {all.rows, all.hidden}, at::kFloat);
  const at::Tensor first = at::from_blob(const_cast<float*>(pooled.split(activations::Split::kTrain).activations.data()), {all.hidden}, at::kFloat);
  CHECK(at::allclose(first, rows.narrow(0, all.offsets[0], all.offsets[1] - all.offsets[0]).mean(0), 1e-5, 1e-6));
}

TEST_CASE("train_probes: no train example is refused saying so; no validation example keeps the last epoch; no test example leaves the test metrics undefined") {
  TempDir tmp;
  probes::MulticlassRunOptions run;
  run.device = "cpu";
  run.training.epochs = 3;
  run.activations = synthetic_file(tmp, {0, 10, 10}, "no_train.h5");
  run.output_dir = tmp.file("a");
  // Regression: the loss divided by no batches, reported as "training diverged ... Lower --lr".
  CHECK_THROWS_WITH_AS(probes::run_multiclass_training(run), doctest::Contains("the train split has no examples"),
                       std::invalid_argument);
  // Regression: with no validation example each epoch scored 0, the first was kept as the best.
  run.activations = synthetic_file(tmp, {20, 0, 10}, "no_val.h5");
  run.output_dir = tmp.file("b");
  probes::run_multiclass_training(run);
  const Json history = read_json_file(tmp.file("b/training_history.json"));
  CHECK(history["best_epoch"] == 3);
  // Regression: with no test example the test metrics were 0.0, a probe always wrong; they are undefined.
  run.activations = synthetic_file(tmp, {20, 10, 0}, "no_test.h5");
  run.output_dir = tmp.file("c");
  probes::run_multiclass_training(run);
  const Json test = read_json_file(tmp.file("c/test_metrics.json"));
  for (const char* metric : {"accuracy", "f1_macro", "f1_micro", "top_3_accuracy", "test_loss"}) {
    CAPTURE(metric);
    CHECK(test.at(metric).is_null());
  }
}

TEST_CASE("--pool on a capture of one row per text, and an output folder holding the inputs, are refused") {
  TempDir tmp;
  const std::string path = synthetic_file(tmp, {20, 10, 10}, "rows.h5");
  probes::BinaryRunOptions run = cpu_binary_run(path, tmp.file("out"), 1);
  run.training.pool = "mean";
  // Regression: --pool was ignored, the report saying the rows had been pooled.
  const std::string refusal = "--pool mean: " + path + " holds one row per text";
  CHECK_THROWS_WITH_AS(probes::run_binary_training(run), doctest::Contains(refusal.c_str()), UsageError);
  // Regression: --overwrite replaced the folder, the activations in it gone.
  make_directories(tmp.file("captures"));
  const std::string inside = synthetic_file(tmp, {20, 10, 10}, "captures/layer_0_activations.h5");
  probes::BinaryRunOptions over = cpu_binary_run(tmp.file("captures"), tmp.file("captures"), 1);
  over.overwrite = true;
  CHECK_THROWS_WITH_AS(probes::run_binary_training(over), doctest::Contains("which --overwrite would delete"), UsageError);
  CHECK(path_exists(inside));
}

TEST_CASE("a training summary over layers whose test AUROC is undefined says null, not -1 or 2, and \"-\" on stdout") {
  TempDir tmp;
  make_directories(tmp.file("no_test"));
  for (int64_t layer : {1, 2}) synthetic_file(tmp, {20, 10, 0}, fmt::format("no_test/layer_{}_activations.h5", layer), layer);
  const Json summary = probes::run_binary_training(cpu_binary_run(tmp.file("no_test"), tmp.file("out"), 1));
  // What train_binary_probes prints without --json: the undefined figures as "-", no best layer.
  const std::string text = probes::binary_summary_text(summary);
  CHECK_CONTAINS(text, "Trained probes at 2 layers in ");
  CHECK_CONTAINS(text, "(cpu, fp32) -> " + tmp.file("out"));
  CHECK_CONTAINS(text, "      1       3           -");
  CHECK_CONTAINS(text, "      2       3           -");
  CHECK(text.find("best layer") == std::string::npos);
  CHECK_CONTAINS(text, "Report: " + tmp.file("out") + "/report.html");
  const Json statistics = read_json_file(tmp.file("out/training_summary.json"))["statistics"];
  CHECK(statistics["avg_auc"].is_null());
  CHECK(statistics["best_auc"].is_null());
  CHECK(statistics["worst_auc"].is_null());
  CHECK(statistics["best_layer"].is_null());
}
