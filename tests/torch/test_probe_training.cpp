// The probe trainers on small synthetic activation files: a probe trained among 45 equals the same probe
// trained alone, early stopping freezes each probe on its own, labels without positives are skipped and
// recorded, the multiclass trainer and the multi-layer outputs.
#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <cmath>

#include "common/files.h"
#include "common/json.h"
#include "probes/binary_run.h"
#include "probes/binary_trainer.h"
#include "probes/multiclass_trainer.h"
#include "probes/probe_files.h"
#include "probes/report_html.h"
#include "probes/synthetic_activations.h"
#include "probes/training_data.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;

namespace {

activations::ActivationFile synthetic_file(const std::string& path, const SyntheticActivations& spec) {
  write_synthetic_activation_file(path, spec);
  return activations::read_activation_file(path);
}

// `labels` labels of `examples` (train, val, test) examples x `hidden` whose means all have the norm `signal`, in
// DIR/layer_{layer}_activations.h5.
activations::ActivationFile equal_signal_file(const std::string& dir, int64_t layer, int64_t labels,
                                              std::array<int64_t, 3> examples, int64_t hidden, double signal) {
  SyntheticActivations spec = uniform_synthetic(labels, examples, hidden);
  spec.signal.assign(static_cast<size_t>(labels), signal);
  return synthetic_file(dir + "/layer_" + std::to_string(layer) + "_activations.h5", spec);
}

BinaryTrainingOptions small_options() {
  BinaryTrainingOptions o;
  o.epochs = 6;
  o.batch_size = 16;
  o.lr = 3e-3;
  o.seed = 11;
  return o;
}

// Early stopping after 2 epochs without improvement, at a constant learning rate, for up to `epochs`.
BinaryTrainingOptions patience_options(int64_t epochs) {
  BinaryTrainingOptions o = small_options();
  o.epochs = epochs;
  o.patience = 2;
  o.cosine_schedule = false;
  return o;
}

// Three labels of 60/30/30 examples x 32 whose means have the norms `signal`, in DIR/layer_0_activations.h5.
activations::ActivationFile three_label_file(const std::string& dir, std::vector<double> signal) {
  SyntheticActivations spec = uniform_synthetic(3, {60, 30, 30}, 32);
  spec.signal = std::move(signal);
  return synthetic_file(dir + "/layer_0_activations.h5", spec);
}

// The largest difference between two weight tensors relative to the largest weight of `b`.
double max_relative_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

const TrainedLabel& find_label(const BinaryTrainingResult& result, const std::string& label) {
  for (const TrainedLabel& t : result.labels) {
    if (t.label == label) return t;
  }
  FAIL("label " << label << " not trained");
  throw std::logic_error("unreachable");
}

size_t probe_index(const BinaryTrainingResult& result, const std::string& label) {
  for (size_t k = 0; k < result.labels.size(); ++k) {
    if (result.labels[k].label == label) return k;
  }
  FAIL("label " << label << " not trained");
  return 0;
}

// Probe `label` of `batched` against the only probe of `alone`: weights, best epoch, history and metrics.
void check_same_probe(const BinaryTrainingResult& batched, const BinaryTrainingResult& alone, const std::string& label,
                      double tolerance) {
  REQUIRE(alone.labels.size() == 1);
  size_t k = probe_index(batched, label);
  const TrainedLabel& a = batched.labels[k];
  const TrainedLabel& b = alone.labels[0];
  CHECK(a.history.best_epoch == b.history.best_epoch);
  CHECK(a.history.val_auc.size() == b.history.val_auc.size());
  for (size_t e = 0; e < std::min(a.history.val_auc.size(), b.history.val_auc.size()); ++e) {
    INFO(label << " epoch " << e + 1 << ": batched val AUROC " << a.history.val_auc[e] << ", alone "
                << b.history.val_auc[e]);
    CHECK(std::fabs(a.history.val_auc[e] - b.history.val_auc[e]) <= 1e-9);
    CHECK(a.history.train_loss[e] == doctest::Approx(b.history.train_loss[e]).epsilon(tolerance));
  }
  for (size_t i = 0; i < batched.best.specs().size(); ++i) {
    double difference = max_relative_difference(batched.best.parameter(i)[static_cast<int64_t>(k)], alone.best.parameter(i)[0]);
    INFO(label << " " << batched.best.specs()[i].name << ": max relative difference " << difference);
    CHECK(difference <= tolerance);
  }
  CHECK(a.test_auc_roc == doctest::Approx(b.test_auc_roc).epsilon(1e-9));
  CHECK(a.test_tuned.f1 == doctest::Approx(b.test_tuned.f1).epsilon(1e-9));
  CHECK(a.val_tuned.threshold == doctest::Approx(b.val_tuned.threshold).epsilon(tolerance));
}

// The CPU, and the first GPU where LibTorch has one (the suites run on the GPU machine too): the fused CUDA
// kernels of training must keep probes independent of each other.
std::vector<at::Device> training_devices() {
  std::vector<at::Device> devices{at::kCPU};
  if (at::hasCUDA()) devices.emplace_back(at::kCUDA, 0);
  return devices;
}

}  // namespace

TEST_CASE("a linear probe trained among 45 equals the same probe trained alone") {
  probekit::testing::TempDir dir;
  activations::ActivationFile file = equal_signal_file(dir.path(), 3, 45, {20, 8, 8}, 32, 2.5);
  for (at::Device device : training_devices()) {
    INFO("device " << device.str());
    BinaryTrainingOptions options = small_options();
    BinaryTrainingResult all = train_binary_probes(file, options, device, at::kFloat, "all");
    REQUIRE(all.labels.size() == 45);
    for (const std::string& label : {"label_00", "label_17", "label_44"}) {
      options.labels = {label};
      BinaryTrainingResult alone = train_binary_probes(file, options, device, at::kFloat, label);
      // The only difference is the width of the [B, H] x [H, K] product, which BLAS may sum in another order:
      // differences of 1e-7 to 1e-6 seen.
      check_same_probe(all, alone, label, 1e-5);
    }
  }
}

TEST_CASE("a multi-head probe trained among 5 equals the same probe trained alone") {
  probekit::testing::TempDir dir;
  activations::ActivationFile file = equal_signal_file(dir.path(), 1, 5, {30, 10, 10}, 24, 3.0);
  BinaryTrainingOptions options = small_options();
  options.kind = &probe_kind("multihead");
  options.hidden_dim = 16;
  options.epochs = 4;
  for (at::Device device : training_devices()) {
    INFO("device " << device.str());
    options.labels = {};
    BinaryTrainingResult all = train_binary_probes(file, options, device, at::kFloat, "all");
    options.labels = {"label_03"};
    BinaryTrainingResult alone = train_binary_probes(file, options, device, at::kFloat, "alone");
    check_same_probe(all, alone, "label_03", 1e-4);
  }
}

TEST_CASE("--no-pin-activations keeps the activations in host memory and trains the same probes as pinned ones") {
  probekit::testing::TempDir dir;
  activations::ActivationFile file = equal_signal_file(dir.path(), 2, 4, {30, 10, 10}, 24, 3.0);
  for (at::Device device : training_devices()) {
    INFO("device " << device.str());
    at::TensorOptions on_device = at::TensorOptions().device(device).dtype(at::kFloat);
    const activations::SplitData& train = file.split(activations::Split::kTrain);
    CHECK(SplitActivations(train, on_device, true).held_on() == device);
    SplitActivations on_host(train, on_device, false);
    CHECK(on_host.held_on() == at::Device(at::kCPU));
    at::Tensor rows = at::tensor(std::vector<int64_t>{5, 0, 7}, at::kLong).to(device);
    CHECK(on_host.rows(rows).device() == device);
    CHECK(at::equal(on_host.rows(rows).cpu(), SplitActivations(train, on_device, true).rows(rows).cpu()));

    BinaryTrainingOptions options = small_options();
    BinaryTrainingResult pinned = train_binary_probes(file, options, device, at::kFloat, "pinned");
    options.pin_activations = false;
    BinaryTrainingResult host = train_binary_probes(file, options, device, at::kFloat, "host");
    CHECK(at::allclose(pinned.best.values(), host.best.values(), 1e-6, 1e-7));
    CHECK(pinned.labels[0].history.val_auc == host.labels[0].history.val_auc);

    MulticlassTrainingOptions multiclass;
    multiclass.epochs = 2;
    MulticlassTrainingResult multiclass_pinned = train_multiclass_probe(file, multiclass, device, at::kFloat, "pinned");
    multiclass.pin_activations = false;
    MulticlassTrainingResult multiclass_host = train_multiclass_probe(file, multiclass, device, at::kFloat, "host");
    CHECK(at::allclose(multiclass_pinned.final_probe.values(), multiclass_host.final_probe.values(), 1e-6, 1e-7));
    CHECK(multiclass_pinned.test.accuracy == multiclass_host.test.accuracy);
  }
}

TEST_CASE("early stopping stops and freezes each probe on its own") {
  probekit::testing::TempDir dir;
  // label_00 is noise: the probe learns its train examples by heart, its validation loss rises and its
  // validation AUROC soon stops improving, so it stops after `patience` epochs; label_01 is learnable and keeps
  // improving.
  activations::ActivationFile file = three_label_file(dir.path(), {0.0, 2.0, 3.0});
  BinaryTrainingOptions options = patience_options(15);
  BinaryTrainingResult result = train_binary_probes(file, options, at::kCPU, at::kFloat, "early");
  const TrainedLabel& noise = find_label(result, "label_00");
  const TrainedLabel& learnable = find_label(result, "label_01");
  REQUIRE(noise.history.stopped_early);
  auto stopped_after = static_cast<int64_t>(noise.history.val_auc.size());
  CHECK(stopped_after < options.epochs);
  CHECK(stopped_after - noise.history.best_epoch == options.patience);
  CHECK(learnable.history.val_auc.size() > noise.history.val_auc.size());
  CHECK(result.epochs_run > stopped_after);

  // The stopped probe's final weights are the ones it had when it stopped: the same as training it alone for
  // exactly that many epochs, even though the others went on.
  options.labels = {"label_00"};
  options.epochs = stopped_after;
  options.patience = kNeverStopEarly;
  BinaryTrainingResult alone = train_binary_probes(file, options, at::kCPU, at::kFloat, "alone");
  ProbeBank final_bank(result.shape, static_cast<int64_t>(result.labels.size()), at::TensorOptions());
  final_bank.values().copy_(result.final_values);
  ProbeBank alone_final(alone.shape, 1, at::TensorOptions());
  alone_final.values().copy_(alone.final_values);
  size_t k = probe_index(result, "label_00");
  for (size_t i = 0; i < final_bank.specs().size(); ++i) {
    double difference = max_relative_difference(final_bank.parameter(i)[static_cast<int64_t>(k)], alone_final.parameter(i)[0]);
    INFO(final_bank.specs()[i].name << ": max relative difference " << difference);
    CHECK(difference <= 1e-5);
  }
  // Its best weights are those of its best epoch, not its last.
  CHECK(!at::equal(result.best.parameter(0)[static_cast<int64_t>(k)], final_bank.parameter(0)[static_cast<int64_t>(k)]));
}

TEST_CASE("--early-stopping-patience 0 stops every probe after its first epoch, as the reference; -1 never stops") {
  probekit::testing::TempDir dir;
  // The reference checks epochs_without_improvement >= patience after every epoch: 0 >= 0 holds at once.
  activations::ActivationFile file = three_label_file(dir.path(), {0.0, 2.0, 3.0});
  BinaryTrainingOptions options = patience_options(8);
  options.patience = 0;
  BinaryTrainingResult result = train_binary_probes(file, options, at::kCPU, at::kFloat, "patience 0");
  CHECK(result.epochs_run == 1);
  for (const TrainedLabel& t : result.labels) {
    INFO(t.label);
    CHECK(t.history.val_auc.size() == 1);
    CHECK(t.history.best_epoch == 1);
    CHECK(t.history.stopped_early);
  }
  // label_00 is noise and stops after two epochs without improvement under patience 2; under -1 it never stops.
  options.patience = kNeverStopEarly;
  result = train_binary_probes(file, options, at::kCPU, at::kFloat, "never");
  CHECK(result.epochs_run == options.epochs);
  for (const TrainedLabel& t : result.labels) {
    INFO(t.label);
    CHECK(t.history.val_auc.size() == static_cast<size_t>(options.epochs));
    CHECK(!t.history.stopped_early);
  }
}

TEST_CASE("an equal validation AUROC with a lower validation loss is an improvement (regression: AUROC 1 froze the best epoch)") {
  probekit::testing::TempDir dir;
  // label_00 is far from the rest: its validation AUROC reaches 1 within an epoch or two and stays there while
  // its validation loss falls. The reference kept its first epoch at AUROC 1, an undertrained probe whose test
  // AUROC and F1 were below the last epoch's; here the best epoch moves on with the loss, and training goes on.
  activations::ActivationFile file = three_label_file(dir.path(), {20.0, 2.0, 3.0});
  BinaryTrainingOptions options = patience_options(12);
  BinaryTrainingResult result = train_binary_probes(file, options, at::kCPU, at::kFloat, "ties");
  const LabelHistory& h = find_label(result, "label_00").history;
  auto first_at_one = std::find(h.val_auc.begin(), h.val_auc.end(), 1.0) - h.val_auc.begin();
  REQUIRE(first_at_one + 1 + options.patience < options.epochs);
  CHECK(h.best_val_auc == 1.0);
  CHECK(h.best_epoch > first_at_one + 1 + options.patience);
  CHECK(h.val_loss[static_cast<size_t>(h.best_epoch - 1)] < h.val_loss[static_cast<size_t>(first_at_one)]);
}

TEST_CASE("a label without a positive validation example is skipped and recorded, never scored 0.5") {
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(4, {20, 8, 8}, 16);
  spec.examples[2] = {20, 0, 8};
  spec.examples[3] = {0, 8, 8};
  activations::ActivationFile file = synthetic_file(dir.path() + "/layer_0_activations.h5", spec);
  BinaryTrainingResult result = train_binary_probes(file, small_options(), at::kCPU, at::kFloat, "skip");
  REQUIRE(result.labels.size() == 2);
  REQUIRE(result.skipped.size() == 2);
  CHECK(result.skipped[0].label == "label_02");
  CHECK(result.skipped[0].reason == "no positive example in the val split");
  CHECK(result.skipped[1].label == "label_03");
  CHECK(result.skipped[1].reason == "no positive example in the train split");

  LayerOutcome outcome{0, file.path, dir.path(), result.labels, result.skipped, result.epochs_run, result.seconds};
  Json aggregate = aggregate_metrics_json(outcome, 8);
  CHECK(aggregate.at("num_probes") == 2);
  CHECK(aggregate.at("per_action_metrics").size() == 2);
  CHECK(aggregate.at("skipped_labels").at(0).at("label") == "label_02");
  CHECK(aggregate.at("skipped_labels").at(0).at("reason") == "no positive example in the val split");
}

TEST_CASE("history, metrics and thresholds follow the reference's conventions") {
  probekit::testing::TempDir dir;
  activations::ActivationFile file = equal_signal_file(dir.path(), 0, 3, {40, 20, 20}, 16, 2.0);
  BinaryTrainingOptions options = small_options();
  options.patience = kNeverStopEarly;
  BinaryTrainingResult result = train_binary_probes(file, options, at::kCPU, at::kFloat, "conv");
  const TrainedLabel& t = result.labels[1];
  const LabelHistory& h = t.history;
  REQUIRE(h.val_auc.size() == 6);
  CHECK(h.learning_rates == epoch_learning_rates(options.lr, 6, true, 1e-5));
  // best_epoch is 1-based: the epoch with the highest validation AUROC, among equal ones the first with the
  // lowest validation loss.
  double best = *std::max_element(h.val_auc.begin(), h.val_auc.end());
  size_t expected = h.val_auc.size();
  for (size_t e = 0; e < h.val_auc.size(); ++e) {
    if (h.val_auc[e] == best && (expected == h.val_auc.size() || h.val_loss[e] < h.val_loss[expected])) expected = e;
  }
  CHECK(h.best_epoch == static_cast<int64_t>(expected) + 1);
  CHECK(h.best_val_auc == best);
  CHECK(!h.stopped_early);
  CHECK(t.test.examples == 60);
  CHECK(t.test.positives == 20);
  CHECK(t.test_at_half.confusion.total() == 60);
  CHECK(t.test_tuned.confusion.total() == 60);

  Json j = label_metrics_json(t, true);
  for (const char* key : {"action", "accuracy", "precision", "recall", "f1", "auc_roc", "auc_pr", "confusion_matrix",
                          "history", "tuned_threshold", "evaluated_weights"}) {
    CHECK_MESSAGE(j.contains(key), key);
  }
  CHECK(j.at("evaluated_weights") == "best_epoch");
  CHECK(j.at("history").at("best_epoch") == h.best_epoch);
  for (const char* key : {"true_negative", "false_positive", "false_negative", "true_positive"}) {
    CHECK_MESSAGE(j.at("confusion_matrix").contains(key), key);
  }
}

TEST_CASE("several layer files: one folder each, the best layer per label by validation AUROC, a summary") {
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(3, {30, 10, 10}, 16);
  make_directories(dir.path() + "/acts");
  for (int64_t layer : {2, 5}) {
    spec.layer = layer;
    spec.signal.assign(3, layer == 2 ? 0.8 : 3.0);
    write_synthetic_activation_file(dir.path() + "/acts/layer_" + std::to_string(layer) + "_activations.h5", spec);
  }
  BinaryRunOptions run;
  run.activations = {dir.path() + "/acts"};
  run.output_dir = dir.path() + "/out";
  run.device = "cpu";
  run.training = small_options();
  run.training.epochs = 3;
  Json summary = run_binary_training(run);
  CHECK(summary.at("layers").size() == 2);
  for (const char* file : {"layer_2/probes.json", "layer_2/probe_label_00.safetensors", "layer_5/aggregate_metrics.json",
                           "layer_5/metrics_label_02.json", "per_action_layer_analysis.json", "training_summary.json",
                           "report.html"}) {
    CHECK_MESSAGE(path_exists(run.output_dir + "/" + file), file);
  }
  Json analysis = read_json_file(run.output_dir + "/per_action_layer_analysis.json");
  REQUIRE(analysis.at("per_action_best_layers").size() == 3);
  for (const Json& entry : analysis.at("per_action_best_layers")) {
    std::string label = entry.at("action");
    const Json& per_layer = analysis.at("action_layer_performance").at(label);
    int64_t expected = per_layer.at("5").at("val_auc").get<double>() > per_layer.at("2").at("val_auc").get<double>() ? 5 : 2;
    CHECK(entry.at("best_layer") == expected);
  }
  Json training = read_json_file(run.output_dir + "/training_summary.json");
  CHECK(training.at("total_layers") == 2);
  CHECK(training.at("total_probes") == 6);
  CHECK(training.at("layer_results").at(1).at("layer") == 5);
  std::string report = read_file(run.output_dir + "/report.html");
  CHECK(report.find("Test AUROC by label and layer") != std::string::npos);
  CHECK(report.find("http") == std::string::npos);  // self-contained: nothing to fetch
}

TEST_CASE("multiclass probe: reference history keys, metrics over present labels, best and final files") {
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(5, {30, 10, 10}, 16);
  spec.signal.assign(5, 3.0);
  write_synthetic_activation_file(dir.path() + "/layer_4_activations.h5", spec);
  MulticlassRunOptions run;
  run.activations = dir.path() + "/layer_4_activations.h5";
  run.output_dir = dir.path() + "/out";
  run.device = "cpu";
  run.training.epochs = 5;
  run.training.lr = 1e-2;
  Json summary = run_multiclass_training(run);
  CHECK(summary.at("classes") == 5);
  Json history = read_json_file(run.output_dir + "/training_history.json");
  CHECK(history.at("train_loss").size() == 5);
  CHECK(history.at("val_accuracy").size() == 5);
  Json metrics = read_json_file(run.output_dir + "/test_metrics.json");
  for (const char* key : {"accuracy", "precision_macro", "recall_macro", "f1_macro", "precision_micro", "recall_micro",
                          "f1_micro", "per_class", "confusion_matrix", "top_3_accuracy"}) {
    CHECK_MESSAGE(metrics.contains(key), key);
  }
  CHECK(metrics.at("per_class").at("label_02").at("support") == 10);
  CHECK(metrics.at("confusion_matrix").size() == 5);
  CHECK(metrics.at("accuracy").get<double>() > 0.5);
  CHECK(path_exists(run.output_dir + "/best_probe.safetensors"));
  CHECK(path_exists(run.output_dir + "/final_probe.safetensors"));
}

// Regression: a probe whose validation AUROC is exactly 0 at every epoch (never above the reference's initial
// best of 0) once had no best epoch, and writing its files read history entry -1.
TEST_CASE("a probe whose validation AUROC stays at 0 keeps its first epoch as the best") {
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(3, {30, 12, 12}, 3);
  activations::ActivationFile file = synthetic_file(dir.path() + "/layer_0_activations.h5", spec);
  // One-hot rows of the label, negated in the validation split: every probe learns to rank its label first,
  // which ranks it last on validation rows, so its validation AUROC is exactly 0.
  for (activations::Split split : activations::kSplits) {
    activations::SplitData& data = file.split(split);
    std::fill(data.activations.begin(), data.activations.end(), 0.0f);
    float value = split == activations::Split::kVal ? -1.0f : 1.0f;
    for (int64_t row = 0; row < data.examples(); ++row) data.activations[static_cast<size_t>(row * 3 + data.labels[static_cast<size_t>(row)])] = value;
  }
  BinaryTrainingResult result = train_binary_probes(file, small_options(), at::kCPU, at::kFloat, "inverted");
  REQUIRE(result.labels.size() == 3);
  bool always_zero = false;
  for (const TrainedLabel& t : result.labels) {
    CHECK(t.history.best_epoch >= 1);
    if (std::all_of(t.history.val_auc.begin(), t.history.val_auc.end(), [](double auc) { return auc == 0.0; })) {
      always_zero = true;
      CHECK(t.history.best_epoch == 1);
    }
  }
  REQUIRE(always_zero);
  make_directories(dir.path() + "/out");
  CHECK_NOTHROW(save_binary_probes(dir.path() + "/out", result, file.attributes, file.path));
}

TEST_CASE("the report's mean validation curve keeps a stopped probe at its last value (regression: it jumped)") {
  // Two probes: one stopped after 2 epochs at 0.6, one ran 3 epochs to 0.97. The mean at epoch 3 is
  // (0.6 + 0.97) / 2 = 0.785, not the 0.97 of the one still training. On the plot (AUROC axis from 0.5, 260 px
  // high from y = 24; epochs 1-3 over x = 44-644) that point is (644.0, 24 + 260 (1 - 0.285 / 0.5)) = (644.0, 135.8).
  TrainedLabel stopped, running;
  stopped.label = "stopped";
  stopped.history.val_auc = {0.5, 0.6};
  stopped.history.best_epoch = 2;
  running.label = "running";
  running.history.val_auc = {0.9, 0.95, 0.97};
  running.history.best_epoch = 3;
  LayerOutcome layer{7, "layer_7_activations.h5", "out", {stopped, running}, {}, 3, 0.1};
  std::string report = render_binary_report({layer}, Json::object());
  size_t mean_title = report.find("<title>mean</title>");
  REQUIRE(mean_title != std::string::npos);
  std::string mean_line = report.substr(report.rfind("<polyline", mean_title), mean_title - report.rfind("<polyline", mean_title));
  CHECK(mean_line.find("644.0,135.8 ") != std::string::npos);
}
