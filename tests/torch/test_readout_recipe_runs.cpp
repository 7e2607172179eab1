// The readout recipe through whole runs: training copies the activation files' recipe into probes.json (the steering
// a capture applied included: it used to stay behind in the HDF5 file), refuses files of one run read differently,
// and inference refuses layers whose probes were read differently, naming the field; probes.json written before
// the recipe still loads.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/json.h"
#include "inference/engine.h"
#include "monitor/stream_monitors.h"
#include "io/hdf5.h"
#include "io/safetensors.h"
#include "probes/binary_run.h"
#include "probes/calibration.h"
#include "probes/probe_files.h"
#include "probes/synthetic_activations.h"
#include "probes/token_streams.h"
#include "probe_fixture.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const char* const kSteering = R"({"site": "resid_post", "add": [{"layer": 1, "coefficient": 4.0}], "ablate": []})";

std::string synthetic_layer(const TempDir& tmp, int64_t layer) {
  probes::SyntheticActivations spec = probes::uniform_synthetic(2, {20, 10, 10}, 8);
  spec.layer = layer;
  const std::string path = tmp.file(fmt::format("activations/layer_{}_activations.h5", layer));
  make_directories(tmp.file("activations"));
  probes::write_synthetic_activation_file(path, spec);
  return path;
}

void set_file_attribute(const std::string& path, const std::string& name, const std::string& value) {
  hdf5::Handle file = hdf5::open_file(path, true);
  hdf5::set_attribute(file.get(), name, value);
}

std::string load_error(const inference::EngineOptions& options) {
  try {
    inference::Engine::load(options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "loaded";
}

}  // namespace

TEST_CASE("probes.json carries the activations' readout recipe, the capture's steering included") {
  TempDir tmp;
  const std::string path = synthetic_layer(tmp, 0);
  set_file_attribute(path, "steering", kSteering);
  set_file_attribute(path, "site", "mlp_out");
  probes::run_binary_training(cpu_binary_run(path, tmp.file("out"), 2));

  const Json index = read_json_file(tmp.file("out/probes.json"));
  CHECK(index.at("readout").at("steering") == Json::parse(kSteering));
  CHECK(index.at("readout").at("site") == "mlp_out");
  CHECK(index.at("readout").at("model_name") == "synthetic");
  const probes::ProbeSet set = probes::ProbeSet::load(tmp.file("out"), at::kCPU, at::kFloat);
  CHECK(set.recipe().steering == Json::parse(kSteering));
  CHECK(set.recipe().site == Site::kMlpOut);

  // An index written before the recipe kept its fields at the top level, where "dtype" is the probes' own.
  Json old = index;
  old.erase("readout");
  old["site"] = "resid_mid";
  old["position"] = "mean";
  old["max_length"] = 64;
  write_json_file(tmp.file("out/probes.json"), old);
  const probes::ProbeSet old_set = probes::ProbeSet::load(tmp.file("out"), at::kCPU, at::kFloat);
  CHECK(old_set.recipe().site == Site::kResidMid);
  CHECK(old_set.recipe().position == Position::kMean);
  CHECK(old_set.recipe().max_length == 64);
  CHECK(old_set.recipe().dtype.empty());
  CHECK(old_set.recipe().prompt_suffix == activations::kDefaultPromptSuffix);
}

TEST_CASE("one training run refuses activation files read differently, naming the field") {
  TempDir tmp;
  synthetic_layer(tmp, 0);
  const std::string second = synthetic_layer(tmp, 1);
  set_file_attribute(second, "prompt_suffix", "\nAnswer:");
  CHECK_THROWS_WITH(probes::run_binary_training(cpu_binary_run(tmp.file("activations"), tmp.file("out"), 2)),
                    doctest::Contains("were read differently (prompt_suffix: \"\\n\\nThe cognitive action"));
  CHECK_FALSE(path_exists(tmp.file("out")));
}

TEST_CASE("inference refuses layers whose probes were read differently, naming the field") {
  TempDir tmp;
  ProbeFixture fixture;
  fixture.epochs = 3;
  fixture.in_process = true;
  const std::string probes_dir = train_fixture_probes(tmp, fixture);
  inference::EngineOptions options = cpu_engine_options(probes_dir);
  REQUIRE(load_error(options) == "loaded");

  Json index = read_json_file(probes_dir + "/layer_5/probes.json");
  index["readout"]["position"] = "mean";
  write_json_file(probes_dir + "/layer_5/probes.json", index);
  CHECK_CONTAINS(load_error(options), "these probes' activations were read otherwise than those of layer 2 "
                                      "(position: \"last\" in layer 2's probes, \"mean\" in");

  index["readout"]["position"] = "last";
  index["readout"]["model_fingerprint"] = "0123456789abcdef";
  write_json_file(probes_dir + "/layer_5/probes.json", index);
  CHECK_CONTAINS(load_error(options), "trained on another model");
  options.force = true;  // --force runs another model's probes, whatever layer they are at
  CHECK(load_error(options) == "loaded");
}

namespace {

// Probes of layer 2 trained 3 epochs in this process on the fixture's capture, which is tmp's "activations".
std::string calibration_probes(const TempDir& tmp) {
  ProbeFixture fixture;
  fixture.epochs = 3;
  fixture.in_process = true;
  fixture.layers = "2";
  return train_fixture_probes(tmp, fixture);
}

}  // namespace

TEST_CASE("calibration: each probe flags at most the target share of ordinary data; --calibrated uses it") {
  TempDir tmp;
  const std::string probes_dir = calibration_probes(tmp);
  probes::CalibrationOptions options;
  options.probes_dir = probes_dir;
  options.activations = tmp.file("activations");
  options.target_fpr = 0.05;
  const Json summary = probes::calibrate(options);
  REQUIRE(summary["layers"].size() == 1);
  // The probes' own capture is no ordinary data, and its 60 examples cannot resolve 5% (regression: both silent).
  const Json& warnings = summary["layers"][0]["warnings"];
  REQUIRE(warnings.size() >= 2);
  CHECK_CONTAINS(warnings[0].get<std::string>(), "60 examples cannot resolve a false-positive rate of 0.05");
  CHECK_CONTAINS(warnings[0].get<std::string>(), "about 139 examples bring it within twice the rate");
  CHECK_CONTAINS(warnings[1].get<std::string>(), "examples are labelled '");
  // Calibrations are replaced only with --overwrite (regression: silently); the tool's --json prints the summary
  // alone on stdout, its warnings with it.
  const std::string again = fmt::format("{} --probes-dir {} --activations {} --target-fpr 0.05 --json",
                                        tool("calibrate_probes"), probes_dir, tmp.file("activations"));
  check_failure(run_command(again), 2, {"/probes.json: the probes are calibrated already (at a false-positive "
                                        "rate of 0.05 on \"", "pass --overwrite"});
  // Regression: data that is not there was named only after --overwrite, which the refusal above asks for.
  check_failure(run_command(fmt::format("{} --probes-dir {} --activations {} --target-fpr 0.05", tool("calibrate_probes"),
                                        probes_dir, tmp.file("nowhere"))),
                1, {"/nowhere: no such file or directory"});
  CommandResult printed = run_command("( " + again + " --overwrite 2>/dev/null )");
  REQUIRE_MESSAGE(printed.exit_code == 0, printed.output);
  CHECK(Json::parse(printed.output) == summary);
  const Json index = read_json_file(probes_dir + "/probes.json");
  for (const Json& probe : index["probes"]) {
    const Json& c = probe.at("calibration");
    CHECK(c["fpr"].get<double>() <= 0.05);
    CHECK(c["examples"] == 60);
    CHECK(c["target_fpr"] == 0.05);
    CHECK(c["source"] == tmp.file("activations/layer_2_activations.h5"));
  }
  inference::Engine engine = inference::Engine::load(cpu_engine_options(probes_dir));
  CHECK(engine.threshold_source() == "calibration");
  // A monitor takes the calibrated threshold unless its policy says "calibrated": false (regression: ignored); these
  // probes read a suffix after the text, so their calibration holds no per-token threshold.
  CHECK_FALSE(index["probes"][0]["calibration"].contains("per_token"));
  monitor::MonitorPolicy watch;
  watch.label = index["probes"][0]["label"].get<std::string>();
  const monitor::ResolvedMonitor calibrated = engine.resolve_monitors({watch})->front();
  CHECK(calibrated.threshold_source == "calibration of whole texts");
  CHECK(calibrated.threshold == index["probes"][0]["calibration"]["threshold"].get<double>());
  watch.calibrated = false;
  const monitor::ResolvedMonitor validated = engine.resolve_monitors({watch})->front();
  CHECK(validated.threshold_source == "validation");
  CHECK(validated.threshold == index["probes"][0]["threshold"].get<double>());
  const probes::ProbeSet set = probes::ProbeSet::load(probes_dir, at::kCPU, at::kFloat);
  CHECK(set.probes()[0].calibrated_threshold == index["probes"][0]["calibration"]["threshold"].get<double>());

  // Ordinary data read otherwise (another site) is refused, naming the field.
  set_file_attribute(tmp.file("activations/layer_2_activations.h5"), "site", "mlp_out");
  options.overwrite = true;
  CHECK_THROWS_WITH(probes::calibrate(options), doctest::Contains("(site: \"resid_post\" in the probes' activations"));
}

TEST_CASE("calibration warns of a probe whose saturated probabilities keep to the rate only above 1.0") {
  TempDir tmp;
  const std::string probes_dir = calibration_probes(tmp);
  // One probe's fp32 weights and bias times 1e4: its logits go far past 17, where fp32 probabilities round to 1.0.
  const std::string label = read_json_file(probes_dir + "/probes.json")["probes"][0]["label"].get<std::string>();
  const std::string path = probes_dir + "/" + probes::binary_probe_file_name(label);
  std::vector<std::vector<float>> values;
  std::vector<safetensors::TensorData> tensors;
  std::map<std::string, std::string> metadata;
  {
    const safetensors::File file(path);
    metadata = file.metadata();
    for (const safetensors::TensorInfo& info : file.tensors()) {
      REQUIRE(info.dtype == safetensors::DType::kF32);
      const auto* data = reinterpret_cast<const float*>(file.data(info));
      values.emplace_back(data, data + info.numel());
      for (float& v : values.back()) v *= 1e4f;
      tensors.push_back({info.name, info.dtype, info.shape, nullptr, info.nbytes()});
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = values[i].data();
  safetensors::write_file(path, tensors, metadata);
  probes::CalibrationOptions options;
  options.probes_dir = probes_dir;
  options.activations = tmp.file("activations");
  options.target_fpr = 0.05;
  const Json summary = probes::calibrate(options);
  // Regression: the threshold above 1.0, which no probability reaches, was saved without a word.
  const std::string expected = "probe '" + label + "' scores 1.0 on more than 0.05 of the calibration texts";
  bool warned = false;
  for (const Json& warning : summary["layers"][0]["warnings"]) warned |= warning.get<std::string>().find(expected) != std::string::npos;
  CHECK_MESSAGE(warned, summary.dump());
  CHECK(read_json_file(probes_dir + "/probes.json")["probes"][0]["calibration"]["threshold"].get<double>() > 1.0);
}

namespace {

// The share of `scores` at or above `threshold`.
double share_at_or_above(const at::Tensor& scores, double threshold) {
  return (scores >= threshold).to(at::kDouble).mean().item<double>();
}

}  // namespace

TEST_CASE("calibration on every token of texts read without a suffix sets the per-token thresholds monitors compare") {
  TempDir tmp;
  const std::string path = tmp.file("layer_0_activations.h5");
  marker_activations(tmp);
  set_file_attribute(path, "prompt_suffix", "");  // as conversations are read
  for (const char* kind : {"multimax", "ema", "linear"}) {
    CAPTURE(kind);
    probes::BinaryRunOptions run = cpu_binary_run(path, tmp.file(kind), 2);
    run.training.kind = &probes::probe_kind(kind);
    run.kinds = {run.training.kind};
    if (std::string(kind) == "multimax") run.training.heads = 2;
    if (std::string(kind) == "linear") run.training.pool = "last";
    probes::run_binary_training(run);
    probes::CalibrationOptions options;
    options.probes_dir = tmp.file(kind);
    options.activations = path;
    options.target_fpr = 0.05;
    probes::calibrate(options);
    const Json calibration = read_json_file(tmp.file(kind) + "/probes.json")["probes"][0]["calibration"];
    REQUIRE(calibration.contains("per_token"));
    const double per_token = calibration["per_token"]["threshold"].get<double>();
    // A text's highest per-token score is at least its whole score (its last token's, or the text's, one of them).
    CHECK(per_token >= calibration["threshold"].get<double>());
    const probes::ProbeSet set = probes::ProbeSet::load(tmp.file(kind), at::kCPU, at::kFloat);
    const activations::ActivationFile file = activations::read_activation_file(path);
    const at::Tensor maxima = probes::token_stream_maxima(set, file).select(1, 0);
    CHECK(maxima.size(0) == 600);
    CHECK(share_at_or_above(maxima, per_token) <= 0.05);
    CHECK(share_at_or_above(maxima, per_token) == doctest::Approx(calibration["per_token"]["fpr"].get<double>()));
    // Each text's maximum is over what a monitor reads at each of its tokens (the first text of the train split).
    const activations::SplitData& train = file.split(activations::Split::kTrain);
    const at::Tensor rows = at::from_blob(const_cast<float*>(train.activations.data()), {train.rows, train.hidden}, at::kFloat);
    const int64_t begin = train.offsets[0], end = train.offsets[1];
    at::Tensor expected;
    if (std::string(kind) == "multimax") {
      std::vector<at::Tensor> prefixes;
      for (int64_t last = begin + 1; last < end; ++last) {
        prefixes.push_back(set.token_logits(rows.narrow(0, begin, last + 1 - begin), {0, last + 1 - begin}));
      }
      expected = at::cat(prefixes).select(1, 0).max();
    } else if (std::string(kind) == "ema") {
      expected = set.row_logits(rows).narrow(0, begin + 1, end - begin - 1).select(1, 0).max();
    } else {
      expected = set.logits(rows).narrow(0, begin + 1, end - begin - 1).select(1, 0).max();
    }
    CHECK(maxima[0].item<double>() == doctest::Approx(at::sigmoid(expected).item<double>()).epsilon(1e-6));
  }
  // Texts read with a suffix have no per-token stream: their thresholds are for whole texts only.
  set_file_attribute(path, "prompt_suffix", "\n\nThe answer is");
  probes::BinaryRunOptions suffixed = cpu_binary_run(path, tmp.file("suffixed"), 2);
  suffixed.training.kind = &probes::probe_kind("ema");
  suffixed.kinds = {suffixed.training.kind};
  probes::run_binary_training(suffixed);
  probes::calibrate({tmp.file("suffixed"), path, 0.05});
  CHECK_FALSE(read_json_file(tmp.file("suffixed") + "/probes.json")["probes"][0]["calibration"].contains("per_token"));
}

TEST_CASE("calibration that fails at a layer leaves every layer's probes as they were") {
  TempDir tmp;
  ProbeFixture fixture;
  fixture.epochs = 2;
  fixture.in_process = true;
  const std::string probes_dir = train_fixture_probes(tmp, fixture);  // layers 2 and 5
  const std::string before = read_text(probes_dir + "/layer_2/probes.json");
  probes::CalibrationOptions options;
  options.probes_dir = probes_dir;
  options.activations = tmp.file("activations/layer_2_activations.h5");  // no file of layer 5
  // Regression: layer 2's probes.json was rewritten with a calibration before layer 5 failed.
  CHECK_THROWS_WITH(probes::calibrate(options), doctest::Contains("no layer 5 file for that layer's probes"));
  CHECK(read_text(probes_dir + "/layer_2/probes.json") == before);
}

TEST_CASE("--target-fpr is refused as a flag: outside (0, 1), or without --calibrate-on in training") {
  TempDir tmp;
  const std::string activations = synthetic_layer(tmp, 3);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --activations {} --target-fpr 2",
                                            tool("calibrate_probes"), tmp.file("nowhere"), activations));
  check_failure(r, 2, {"--target-fpr"});
  r = run_command(fmt::format("{} --activations {} --output-dir {} --target-fpr 0.05 --device cpu",
                              tool("train_binary_probes"), activations, tmp.file("out")));
  check_failure(r, 2, {"--target-fpr requires --calibrate-on"});
}

TEST_CASE("train_binary_probes --calibrate-on sets each layer's thresholds on that capture's file of the layer") {
  TempDir tmp;
  const std::string path = synthetic_layer(tmp, 3);
  probes::BinaryRunOptions run = cpu_binary_run(path, tmp.file("out"), 2);
  run.calibrate_on = tmp.file("activations");
  run.target_fpr = 0.1;
  probes::run_binary_training(run);
  const Json index = read_json_file(tmp.file("out/probes.json"));
  for (const Json& probe : index["probes"]) {
    CHECK(probe.at("calibration")["fpr"].get<double>() <= 0.1);
    CHECK(probe.at("calibration")["examples"] == 80);
  }
  run.calibrate_on = synthetic_layer(tmp, 4);
  run.overwrite = true;
  CHECK_THROWS_WITH(probes::run_binary_training(run), doctest::Contains("no layer 3 file for that layer's probes"));
}

TEST_CASE("train_binary_probes --eval-file scores each layer's probes on a second capture, as the test split") {
  TempDir tmp;
  const std::string path = synthetic_layer(tmp, 3);
  probes::SyntheticActivations other = probes::uniform_synthetic(2, {30, 15, 15}, 8);
  other.layer = 3;  // the same seed: the same label means, other examples (more of them)
  make_directories(tmp.file("eval"));
  probes::write_synthetic_activation_file(tmp.file("eval/layer_3_activations.h5"), other);
  probes::BinaryRunOptions run = cpu_binary_run(path, tmp.file("out"), 5);
  run.eval_file = tmp.file("eval");
  probes::run_binary_training(run);
  const Json metrics = read_json_file(tmp.file("out/eval_metrics.json"));
  CHECK(metrics["examples"] == 120);
  CHECK(metrics["source"] == tmp.file("eval/layer_3_activations.h5"));
  REQUIRE(metrics["labels"].size() == 2);
  for (const Json& label : metrics["labels"]) {
    CHECK(label["positives"] == 60);
    CHECK(label["auc_roc"].get<double>() > 0.5);
    CHECK(label["auc_roc_ci95"].size() == 2);
    CHECK(label["recall_at_fpr"].contains("0.01"));
  }
  set_file_attribute(tmp.file("eval/layer_3_activations.h5"), "position", "mean");
  run.overwrite = true;
  CHECK_THROWS_WITH(probes::run_binary_training(run),
                    doctest::Contains("read otherwise than the training data (position"));
}
