// Whole runs of the probe kinds fitted by their own solver: their files (linear probes with model_type logistic
// or mean-diff, which ProbeSet and multi_probe_inference read as linear probes), recall_at_fpr in every metrics
// file and the aggregate, and the comparison of several kinds.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "metrics/intervals.h"
#include "probes/binary_run.h"
#include "probes/probe_files.h"
#include "probes/synthetic_activations.h"
#include "inference_runs.h"
#include "probe_fixture.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;
using namespace probekit::testing;

namespace {

// Three labels of 40/20/40 examples x 16, label_02's mean the weakest: a test split large enough for the rates.
std::string three_label_file(const TempDir& tmp) {
  SyntheticActivations spec = uniform_synthetic(3, {40, 20, 40}, 16);
  spec.signal = {3.0, 2.0, 1.0};
  std::string path = tmp.file("layer_0_activations.h5");
  write_synthetic_activation_file(path, spec);
  return path;
}

BinaryRunOptions run_options(const std::string& activations, const std::string& output,
                             const std::vector<std::string>& kinds) {
  BinaryRunOptions o = cpu_binary_run(activations, output, 4);
  o.training.seed = 5;
  o.kinds.clear();
  for (const std::string& kind : kinds) o.kinds.push_back(&probe_kind(kind));
  o.training.kind = o.kinds.front();
  return o;
}

// The recall_at_fpr block of a metrics file: both rates, each a value, an interval around it and a threshold.
void check_recall_block(const Json& block, const std::string& where) {
  INFO(where << ": " << block.dump());
  REQUIRE(block.is_object());
  for (const char* rate : {"0.01", "0.05"}) {
    REQUIRE(block.contains(rate));
    const Json& r = block.at(rate);
    double value = r.at("value").get<double>();
    CHECK(value >= 0.0);
    CHECK(value <= 1.0);
    REQUIRE(r.at("ci95").size() == 2);
    CHECK(r.at("ci95")[0].get<double>() <= value);
    CHECK(value <= r.at("ci95")[1].get<double>());
    CHECK(r.at("threshold").get<double>() > 0.0);
    CHECK(r.at("threshold").get<double>() <= 1.0);
  }
}

}  // namespace

TEST_CASE("a logistic run writes linear probes that ProbeSet scores as the trainer did, with recall at 1% and 5% FPR") {
  TempDir tmp;
  std::string activations = three_label_file(tmp);
  run_binary_training(run_options(activations, tmp.file("logistic"), {"logistic"}));
  Json index = read_json_file(tmp.file("logistic/probes.json"));
  CHECK(index["model_type"] == "logistic");
  CHECK(index["model_class"] == "BinaryLinearProbe");
  // Loaded as any binary probes: the stored check rows give the stored logits.
  ProbeSet set = ProbeSet::load(tmp.file("logistic"), at::kCPU, at::kFloat);
  safetensors::File check(tmp.file("logistic/logits_check.safetensors"));
  at::Tensor logits = set.logits(read_tensor(check, check.at("inputs")));
  CHECK(at::allclose(logits, read_tensor(check, check.at("logits")), 1e-5, 1e-5));

  Json metrics = read_json_file(tmp.file("logistic/metrics_label_02.json"));
  check_recall_block(metrics.at("recall_at_fpr"), "metrics_label_02.json");
  CHECK(metrics["evaluated_weights"] == "fitted");
  CHECK(metrics["solver"]["converged"] == true);
  CHECK(metrics["solver"]["gradient_over_bound"].get<double>() <= 8.0);  // 1 at the tolerance, 8 at the rounding limit
  CHECK(metrics["history"]["best_epoch"] == 1);
  // The recall equals the metric recomputed from the loaded probe's test logits.
  auto file = activations::read_activation_file(activations);
  const auto& test = file.split(activations::Split::kTest);
  at::Tensor x = at::from_blob(const_cast<float*>(test.activations.data()), {test.rows, test.hidden}, at::kFloat);
  at::Tensor scores = set.logits(x).select(1, 2).to(at::kDouble).contiguous();
  std::vector<int> truth;
  for (int64_t label : test.labels) truth.push_back(label == 2 ? 1 : 0);
  metrics::RecallAtFpr expected = metrics::recall_at_fpr(
      truth, std::vector<double>(scores.data_ptr<double>(), scores.data_ptr<double>() + scores.numel()), 0.05);
  CHECK(metrics["recall_at_fpr"]["0.05"]["value"].get<double>() == doctest::Approx(expected.value).epsilon(1e-9));
  CHECK(metrics["recall_at_fpr"]["0.05"]["threshold_logit"].get<double>() ==
        doctest::Approx(expected.threshold).epsilon(1e-5));

  Json aggregate = read_json_file(tmp.file("logistic/aggregate_metrics.json"));
  CHECK(aggregate["average_recall_at_fpr"].contains("0.01"));
  CHECK(aggregate["average_recall_at_fpr"].contains("0.05"));
  CHECK(aggregate["evaluated_weights"] == "fitted");
  CHECK_CONTAINS(read_text(tmp.file("logistic/report.html")), "recall @1% FPR");
}

TEST_CASE("every kind's metrics files carry recall_at_fpr, the same for the same seed") {
  TempDir tmp;
  std::string activations = three_label_file(tmp);
  run_binary_training(run_options(activations, tmp.file("a"), {"linear"}));
  run_binary_training(run_options(activations, tmp.file("b"), {"linear"}));
  Json a = read_json_file(tmp.file("a/metrics_label_00.json")), b = read_json_file(tmp.file("b/metrics_label_00.json"));
  check_recall_block(a.at("recall_at_fpr"), "linear metrics_label_00.json");
  CHECK(a["recall_at_fpr"] == b["recall_at_fpr"]);
  CHECK(a["auc_roc_ci95"] == b["auc_roc_ci95"]);
  CHECK(a["evaluated_weights"] == "best_epoch");
  CHECK_FALSE(a.contains("solver"));
}

TEST_CASE("--model-type linear,logistic,mean-diff trains each kind into its folder and compares them") {
  TempDir tmp;
  std::string activations = three_label_file(tmp);
  BinaryRunOptions o = run_options(activations, tmp.file("out"), {"linear", "logistic", "mean-diff"});
  Json summary = run_binary_training(o);
  CHECK(summary["comparison"] == tmp.file("out") + "/comparison.json");
  Json comparison = read_json_file(tmp.file("out/comparison.json"));
  CHECK(comparison["kinds"] == Json({"linear", "logistic", "mean-diff"}));
  CHECK(comparison["bootstrap_resamples"] == 1000);
  REQUIRE(comparison["layers"].size() == 1);
  const Json& layer = comparison["layers"][0];
  REQUIRE(layer["labels"].size() == 3);
  for (const std::string kind : {"linear", "logistic", "mean-diff"}) {
    CHECK(read_json_file(tmp.file("out/" + kind + "/probes.json"))["model_type"] == kind);
    CHECK(is_regular_file(tmp.file("out/" + kind + "/report.html")));
    CHECK(layer["kinds"][kind]["directory"] == tmp.file("out") + "/" + kind);
    for (const Json& row : layer["labels"]) {
      // Each kind's figures are those of its own metrics file.
      std::string label = row["label"];
      Json metrics = read_json_file(tmp.file("out/" + kind + "/metrics_" + label + ".json"));
      INFO(kind << " " << label);
      CHECK(row[kind]["auc_roc"] == metrics["auc_roc"]);
      CHECK(row[kind]["auc_roc_ci95"] == metrics["auc_roc_ci95"]);
      CHECK(row[kind]["f1_tuned"] == metrics["tuned_threshold"]["f1"]);
      CHECK(row[kind]["recall_at_fpr"] == metrics["recall_at_fpr"]);
    }
  }
  std::string report = read_text(tmp.file("out/report.html"));
  CHECK_CONTAINS(report, "Probe kinds compared");
  CHECK_CONTAINS(report, "mean-diff recall @0.01 FPR");
  CHECK_CONTAINS(report, R"(<a href="logistic/report.html">)");

  o.kinds.push_back(&probe_kind("logistic"));
  o.overwrite = true;
  CHECK_THROWS_WITH_AS(run_binary_training(o), doctest::Contains("lists 'logistic' twice"), UsageError);
}

TEST_CASE("multi_probe_inference ranks with logistic probes: printed scores equal sigmoid(w.h + b) of their files") {
  TempDir tmp;
  ProbeFixture logistic;
  logistic.layers = "5";
  logistic.flags = "--model-type logistic --C 0.5";
  std::string probes = train_fixture_probes(tmp, logistic);
  Json index = read_json_file(probes + "/probes.json");
  CHECK(index["model_type"] == "logistic");
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --top-k 3 --json --text \"{}\"",
                                            tool("multi_probe_inference"), probes, kGemmaModel, kReframingText));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  Json printed = printed_json(r);
  safetensors::File hidden = inspect_hidden(tmp, kGemmaModel);
  check_printed_scores(printed, probes, read_tensor(hidden, hidden.at("layers"))[5][-1]);
  // Ranked: the most confident first.
  const Json& predictions = printed["predictions"];
  for (size_t i = 1; i < predictions.size(); ++i) {
    CHECK(predictions[i - 1]["confidence"].get<double>() >= predictions[i]["confidence"].get<double>());
  }
}

TEST_CASE("--model-type attention,linear,mean-diff --pool mean on one --position all capture: attention reads every "
          "token, the others the pooled rows, compared side by side") {
  TempDir tmp;
  SyntheticActivations spec = uniform_synthetic(2, {30, 15, 15}, 16);
  spec.signal = {5.0, 0.0};
  spec.min_tokens = 5;
  spec.max_tokens = 12;
  std::string activations = tmp.file("layer_0_activations.h5");
  write_synthetic_activation_file(activations, spec);
  BinaryRunOptions o = run_options(activations, tmp.file("out"), {"attention", "linear", "mean-diff"});
  o.training.pool = "mean";
  run_binary_training(o);
  Json comparison = read_json_file(tmp.file("out/comparison.json"));
  CHECK(comparison["kinds"] == Json({"attention", "linear", "mean-diff"}));
  CHECK(read_json_file(tmp.file("out/attention/probes.json"))["readout"]["position"] == "all");
  CHECK(read_json_file(tmp.file("out/linear/probes.json"))["readout"]["position"] == "mean");
  CHECK(read_json_file(tmp.file("out/mean-diff/probes.json"))["readout"]["position"] == "mean");
  for (const Json& row : comparison["layers"][0]["labels"]) CHECK(row["attention"]["auc_roc"].is_number());
}
