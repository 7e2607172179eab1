// The probe kinds fitted by their own solver against scikit-learn (tests/python/sklearn_logistic_reference.py run
// on the same train rows by Debian's python3-sklearn): logistic one-vs-rest and multinomial for two C values,
// mean-diff against its direct computation; their files, loaded back as linear probes; the metrics files'
// recall_at_fpr; and the comparison run of several kinds.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "capture/capture.h"
#include "common/json.h"
#include "data/example_generator.h"
#include "probes/binary_run.h"
#include "probes/binary_trainer.h"
#include "probes/multiclass_trainer.h"
#include "probes/probe_files.h"
#include "probes/solvers/logistic.h"
#include "probes/synthetic_activations.h"
#include "probes/token_rows.h"
#include "probes/training_data.h"
#include "probe_fixture.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;
using testing::TempDir;

namespace {

// Weights agree with sklearn's when max |ours - sklearn| over the weights and the intercept is at most this
// fraction of sklearn's largest |value|.
constexpr double kSklearnTolerance = 1e-3;

// `labels` labels of 50/20/20 examples x 32 whose means have the norm 2: overlapping classes, so the penalty and
// the data both shape the fit. With `with_absent_label`, one more label (index 2) has no example at all.
activations::ActivationFile overlapping_file(const TempDir& tmp, bool with_absent_label = false, int64_t labels = 4) {
  SyntheticActivations spec = uniform_synthetic(with_absent_label ? labels + 1 : labels, {50, 20, 20}, 32);
  spec.signal.assign(spec.label_names.size(), 2.0);
  if (with_absent_label) spec.examples[2] = {0, 0, 0};
  std::string path = tmp.file("layer_0_activations.h5");
  write_synthetic_activation_file(path, spec);
  return activations::read_activation_file(path);
}

// Runs the sklearn reference on the train split of `file`; returns its JSON answer.
Json sklearn_fit(const TempDir& tmp, const activations::ActivationFile& file, const std::string& mode, double C,
                 const std::vector<int64_t>& labels, double tol = 1e-4, const std::string& solver = "lbfgs") {
  const activations::SplitData& train = file.split(activations::Split::kTrain);
  Json rows = Json::array();
  for (int64_t r = 0; r < train.rows; ++r) {
    rows.push_back(std::vector<double>(train.activations.begin() + r * train.hidden,
                                       train.activations.begin() + (r + 1) * train.hidden));
  }
  write_json_file(tmp.file("problem.json"), {{"mode", mode}, {"C", C}, {"x", rows}, {"y", train.labels}, {"labels", labels}, {"tol", tol}, {"solver", solver}});
  // The first python3 with sklearn: on PATH, else Debian's (a venv on PATH may lack it, or hide Debian's).
  testing::CommandResult r = testing::run_command(fmt::format(
      "for python in python3 /usr/bin/python3; do if \"$python\" -c 'import sklearn' 2>/dev/null; then "
      "exec \"$python\" {}/python/sklearn_logistic_reference.py {} {}; fi; done; "
      "echo 'no python3 with sklearn: apt-get install python3-sklearn (scripts/setup.sh)'; exit 1",
      PROBEKIT_TESTS_DIR, tmp.file("problem.json"), tmp.file("sklearn.json")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_json_file(tmp.file("sklearn.json"));
}

// max |ours - expected| over the weights and the intercept, over the largest |expected value|.
double relative_difference(const at::Tensor& weight, double bias, const Json& expected_coef, double expected_bias) {
  auto coef = expected_coef.get<std::vector<double>>();
  at::Tensor expected = at::tensor(coef, at::kDouble);
  at::Tensor ours = weight.to(at::kDouble).flatten();
  REQUIRE(ours.numel() == expected.numel());
  double largest = std::max(expected.abs().max().item<double>(), std::fabs(expected_bias));
  double difference = std::max((ours - expected).abs().max().item<double>(), std::fabs(bias - expected_bias));
  return difference / largest;
}

BinaryTrainingOptions fitted_options(const std::string& kind, double C) {
  BinaryTrainingOptions o;
  o.kind = &probe_kind(kind);
  o.C = C;
  return o;
}

// Every probe of `result` against sklearn's fit of its label; returns the largest relative difference.
double check_against_sklearn(const BinaryTrainingResult& result, const Json& sklearn, const std::string& what) {
  double worst = 0.0;
  for (size_t k = 0; k < result.labels.size(); ++k) {
    const TrainedLabel& t = result.labels[k];
    const Json& expected = sklearn.at(std::to_string(t.label_index));
    double difference = relative_difference(result.best.parameter(0)[static_cast<int64_t>(k)],
                                            result.best.parameter(1)[static_cast<int64_t>(k)].item<double>(),
                                            expected.at("coef"), expected.at("intercept").get<double>());
    INFO(what << ", label " << t.label << ": relative difference to sklearn " << difference << " (intercept "
              << result.best.parameter(1)[static_cast<int64_t>(k)].item<double>() << ", sklearn's "
              << expected.at("intercept").get<double>() << ")");
    CHECK(difference <= kSklearnTolerance);
    REQUIRE(t.solver.has_value());
    CHECK(t.solver->converged);
    worst = std::max(worst, difference);
  }
  return worst;
}

}  // namespace

TEST_CASE("logistic probes equal scikit-learn's LogisticRegression, one-vs-rest, for every label and two C" * doctest::test_suite("numeric")) {
  TempDir tmp;
  activations::ActivationFile file = overlapping_file(tmp);
  for (double C : {1.0, 0.05}) {
    BinaryTrainingResult result = train_binary_probes(file, fitted_options("logistic", C), at::kCPU, at::kFloat, "test");
    REQUIRE(result.labels.size() == 4);
    Json sklearn = sklearn_fit(tmp, file, "ovr", C, {0, 1, 2, 3});
    double worst = check_against_sklearn(result, sklearn, fmt::format("logistic, C {}", C));
    MESSAGE("logistic one-vs-rest, C " << C << ": largest relative difference to sklearn " << worst);
    // Stored as a linear probe of input_dim 32, fitted once (no dropout).
    CHECK(result.shape.kind->name() == std::string("logistic"));
    CHECK(result.shape.dropout == 0.0);
    CHECK(result.labels[0].history.best_epoch == 1);
  }
}

// Rows harder to condition than the synthetic ones: the fixture model's layer 3 on 450 example texts (45 labels x 10,
// make_example dataset --labels 45 --per-label 10), 315 train rows of 64 whose last tokens share a common offset of
// norm 23.7 (their spread about it: 15.3). A stopping rule relative to the first gradient on uncentred rows stopped up
// to 6.2e-3 from the optimum here (226 iterations on average, train_binary_probes on the same rows); the fits now run
// on centred rows and stop on the gradient against the penalty's scale: 8.1e-6 (130), and 2.0e-5 in this test's split.
TEST_CASE("logistic probes reach scikit-learn's optimum on the fixture model's rows, not only near it" * doctest::test_suite("numeric")) {
  TempDir tmp;
  data::ExampleSetOptions examples;
  examples.labels = 45;
  examples.per_label = 10;
  data::write_example_dataset(tmp.file("data.jsonl"), examples, true);
  capture::CaptureOptions capture;
  capture.model_dir = testing::kGemmaModel;
  capture.dataset_path = tmp.file("data.jsonl");
  capture.layers = "3";
  capture.output_dir = tmp.file("act");
  capture::run_capture(capture);
  activations::ActivationFile file = activations::read_activation_file(tmp.file("act/layer_3_activations.h5"));
  REQUIRE(file.split(activations::Split::kTrain).rows == 315);
  BinaryTrainingResult result = train_binary_probes(file, fitted_options("logistic", 1.0), at::kCPU, at::kFloat, "test");
  REQUIRE(result.labels.size() == 45);
  std::vector<int64_t> labels;
  for (const TrainedLabel& t : result.labels) labels.push_back(t.label_index);
  // Newton's method to 1e-12 is the optimum: sklearn's lbfgs stops up to 8.6e-4 short of it here even at tol 1e-10.
  Json optimum = sklearn_fit(tmp, file, "ovr", 1.0, labels, 1e-12, "newton-cholesky");
  const double worst = check_against_sklearn(result, optimum, "the fixture's layer 3");
  MESSAGE("logistic on the fixture's layer 3: largest relative difference to the optimum " << worst);
  CHECK(worst <= 1e-4);
}

TEST_CASE("mean-diff probes equal the difference of means scaled by sklearn's one-dimensional fit") {
  TempDir tmp;
  activations::ActivationFile file = overlapping_file(tmp);
  for (double C : {1.0, 0.05}) {
    BinaryTrainingResult result = train_binary_probes(file, fitted_options("mean-diff", C), at::kCPU, at::kFloat, "test");
    Json reference = sklearn_fit(tmp, file, "mean-diff", C, {0, 1, 2, 3});
    double worst = check_against_sklearn(result, reference, fmt::format("mean-diff, C {}", C));
    MESSAGE("mean-diff, C " << C << ": largest relative difference to numpy + sklearn " << worst);
  }
  // The direction by hand for label 1: its weight is parallel to mean(label 1) - mean(rest).
  const activations::SplitData& train = file.split(activations::Split::kTrain);
  at::Tensor x = at::from_blob(const_cast<float*>(train.activations.data()), {train.rows, train.hidden}, at::kFloat)
                     .to(at::kDouble);
  at::Tensor is_one = at::tensor(train.labels, at::kLong).eq(1);
  at::Tensor direction = x.index({is_one}).mean(0) - x.index({~is_one}).mean(0);
  BinaryTrainingResult result = train_binary_probes(file, fitted_options("mean-diff", 1.0), at::kCPU, at::kFloat, "test");
  at::Tensor weight = result.best.parameter(0)[1].flatten().to(at::kDouble);
  double cosine = (weight * direction).sum().item<double>() / (weight.norm().item<double>() * direction.norm().item<double>());
  INFO("cosine between the weight and the difference of means: " << cosine);
  CHECK(cosine > 1.0 - 1e-6);
}

TEST_CASE("train_probes --model-type logistic fits sklearn's multinomial model; a class without examples gets no weight") {
  TempDir tmp;
  activations::ActivationFile file = overlapping_file(tmp, /*with_absent_label=*/true);
  for (double C : {1.0, 0.05}) {
    MulticlassTrainingOptions o;
    o.kind = &probe_kind("logistic");
    o.C = C;
    MulticlassTrainingResult result = train_multiclass_probe(file, o, at::kCPU, at::kFloat, "test");
    REQUIRE(result.solver.has_value());
    CHECK(result.solver->converged);
    Json sklearn = sklearn_fit(tmp, file, "multinomial", C, {});
    auto classes = sklearn.at("classes").get<std::vector<int64_t>>();
    REQUIRE(classes == std::vector<int64_t>{0, 1, 3, 4});
    at::Tensor weight = result.best_probe.parameter(0)[0], bias = result.best_probe.parameter(1)[0];
    double worst = 0.0;
    for (size_t c = 0; c < classes.size(); ++c) {
      double difference = relative_difference(weight[classes[c]], bias[classes[c]].item<double>(),
                                              sklearn.at("coef").at(c), sklearn.at("intercept").at(c).get<double>());
      INFO("C " << C << ", class " << classes[c] << ": relative difference to sklearn " << difference);
      CHECK(difference <= kSklearnTolerance);
      worst = std::max(worst, difference);
    }
    MESSAGE("logistic multinomial, C " << C << ": largest relative difference to sklearn " << worst);
    CHECK(weight[2].abs().max().item<double>() == 0.0);
    CHECK(bias[2].item<double>() == solvers::kAbsentClassBias);
    CHECK(at::equal(result.best_probe.values(), result.final_probe.values()));
  }
}

TEST_CASE("train_probes --model-type logistic fits two classes as sklearn does, one binary problem") {
  TempDir tmp;
  activations::ActivationFile file = overlapping_file(tmp, false, 2);
  MulticlassTrainingOptions o;
  o.kind = &probe_kind("logistic");
  MulticlassTrainingResult result = train_multiclass_probe(file, o, at::kCPU, at::kFloat, "test");
  Json sklearn = sklearn_fit(tmp, file, "multinomial", 1.0, {});
  REQUIRE(sklearn.at("coef").size() == 1);  // sklearn's binary model: the second class against the first
  at::Tensor weight = result.best_probe.parameter(0)[0], bias = result.best_probe.parameter(1)[0];
  // The softmax of the two rows is the sigmoid of their difference: that is sklearn's model.
  double difference = relative_difference(weight[1] - weight[0], (bias[1] - bias[0]).item<double>(),
                                          sklearn.at("coef").at(0), sklearn.at("intercept").at(0).get<double>());
  INFO("relative difference to sklearn " << difference);
  CHECK(difference <= kSklearnTolerance);
}

TEST_CASE("train_probes refuses mean-diff, naming why") {
  TempDir tmp;
  activations::ActivationFile file = overlapping_file(tmp);
  MulticlassTrainingOptions o;
  o.kind = &probe_kind("mean-diff");
  CHECK_THROWS_WITH_AS(train_multiclass_probe(file, o, at::kCPU, at::kFloat, "test"),
                       doctest::Contains("one-vs-rest"), UsageError);
}

namespace {

// The same texts with one row each, as a --position last or mean capture gives them (train_binary_probes --pool).
activations::ActivationFile pooled(const activations::ActivationFile& file, bool mean) {
  BinaryTrainingOptions options;
  options.pool = mean ? "mean" : "last";
  return rows_for_kind(file, options);
}

BinaryTrainingResult train_kind(const activations::ActivationFile& file, const char* kind) {
  BinaryTrainingOptions options;
  options.kind = &probe_kind(kind);
  options.epochs = 15;
  options.lr = 5e-3;
  options.labels = {"marker"};
  return train_binary_probes(file, options, at::kCPU, at::kFloat, kind);
}

}  // namespace

TEST_CASE("an attention probe finds a marker token anywhere in a text, where last-token and mean pooling cannot") {
  TempDir tmp;
  activations::ActivationFile file = testing::marker_activations(tmp);
  BinaryTrainingResult attention = train_kind(file, "attention");
  BinaryTrainingResult last = train_kind(pooled(file, false), "linear");
  BinaryTrainingResult mean = train_kind(pooled(file, true), "linear");
  const double a = attention.labels[0].test_auc_roc, l = last.labels[0].test_auc_roc, m = mean.labels[0].test_auc_roc;
  INFO("test AUROC: attention " << a << ", last token " << l << ", mean pooling " << m);
  CHECK(attention.shape.skip_leading == 1);
  CHECK(a >= 0.95);
  CHECK(l <= 0.65);
  CHECK(m <= a - 0.15);

  // On marker texts the probe's attention sits on one token: its largest weight holds most of the mass.
  const activations::SplitData& test = file.split(activations::Split::kTest);
  at::Tensor rows = at::from_blob(const_cast<float*>(test.activations.data()), {test.rows, test.hidden}, at::kFloat);
  TokenLayout layout = token_layout(test.offsets, attention.shape);
  std::vector<int64_t> texts;
  for (int64_t e = 0; e < test.examples(); ++e) {
    if (test.labels[e] == 0) texts.push_back(e);
  }
  TokenBatch batch = token_batch(rows, token_index(layout, texts.data(), static_cast<int64_t>(texts.size())));
  const ProbeKind& kind = *attention.shape.kind;
  at::Tensor weights = kind.token_weights(attention.best, kind.forward_tokens(attention.best, batch)).view({-1});
  std::vector<double> largest(static_cast<size_t>(batch.texts), 0.0);
  for (int64_t r = 0; r < weights.size(0); ++r) {
    auto& text_largest = largest[static_cast<size_t>(batch.text[r].item<int64_t>())];
    text_largest = std::max(text_largest, weights[r].item<double>());
  }
  double mean_largest = 0.0;
  for (double w : largest) mean_largest += w / static_cast<double>(largest.size());
  INFO("mean largest weight on marker texts " << mean_largest);
  CHECK(mean_largest >= 0.5);
}

TEST_CASE("attention probes: wrong captures and flags are refused, naming what to do") {
  TempDir tmp;
  activations::ActivationFile file = testing::marker_activations(tmp);
  CHECK_THROWS_WITH(train_kind(pooled(file, false), "attention"), doctest::Contains("capture with --position all"));
  CHECK_THROWS_WITH(train_kind(file, "linear"), doctest::Contains("or trains an every-token kind such as --model-type attention on it"));
  MulticlassTrainingOptions multiclass;
  multiclass.kind = &probe_kind("attention");
  CHECK_THROWS_WITH(train_multiclass_probe(file, multiclass, at::kCPU, at::kFloat, "t"),
                    doctest::Contains("attention probes train one-vs-rest: use train_binary_probes"));
  BinaryTrainingOptions options;
  options.kind = &probe_kind("attention");
  options.heads = 0;
  CHECK_THROWS_WITH(train_binary_probes(file, options, at::kCPU, at::kFloat, "t"), "--heads must be positive, got 0");
  options.heads = 2;
  options.max_tokens = -1;
  CHECK_THROWS_WITH(train_binary_probes(file, options, at::kCPU, at::kFloat, "t"),
                    "--max-tokens must be 0 (every token) or positive, got -1");
}
