// Probe files as other programs see them: tensor names, shapes, dtypes and metadata of the safetensors files
// (what the reference's load_state_dict needs), probes.json, loading a directory back for inference, and the
// training tools' answers to bad input files, run as processes.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "common/files.h"
#include "common/json.h"
#include "io/hdf5.h"
#include "io/safetensors.h"
#include "probes/binary_run.h"
#include "probes/multiclass_trainer.h"
#include "probes/probe_files.h"
#include "probes/synthetic_activations.h"
#include "probe_fixture.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;

namespace {

std::string write_small_file(const std::string& directory, int64_t labels = 4) {
  SyntheticActivations spec = uniform_synthetic(labels, {24, 8, 8}, 12);
  spec.layer = 7;
  spec.signal.assign(static_cast<size_t>(labels), 2.5);
  std::string path = directory + "/layer_7_activations.h5";
  write_synthetic_activation_file(path, spec);
  return path;
}

BinaryRunOptions small_run(const std::string& activations, const std::string& output) {
  BinaryRunOptions run = probekit::testing::cpu_binary_run(activations, output, 3);
  run.training.batch_size = 8;
  run.training.hidden_dim = 16;
  return run;
}

struct ToolResult {
  int exit_code = -1;
  std::string log;
};

// Runs a built tool with `arguments`, capturing stderr.
ToolResult run_tool_process(const std::string& tool, const std::string& arguments, const std::string& log_path) {
  std::string command = std::string(PROBEKIT_TOOLS_DIR) + "/" + tool + " " + arguments + " > /dev/null 2> " + log_path;
  int status = std::system(command.c_str());
  ToolResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.log = read_file(log_path);
  return result;
}

}  // namespace

TEST_CASE("linear probe files: the reference's state-dict names and shapes, float32, metadata") {
  probekit::testing::TempDir dir;
  BinaryRunOptions run = small_run(write_small_file(dir.path()), dir.path() + "/out");
  run_binary_training(run);
  Json index = read_json_file(run.output_dir + "/probes.json");
  CHECK(index.at("format") == "probekit.binary_probes");
  CHECK(index.at("model_class") == "BinaryLinearProbe");
  CHECK(index.at("input_dim") == 12);
  CHECK(index.at("layer") == 7);
  REQUIRE(index.at("probes").size() == 4);
  for (const Json& entry : index.at("probes")) {
    std::string label = entry.at("label");
    safetensors::File file(run.output_dir + "/" + entry.at("file").get<std::string>());
    REQUIRE(file.tensors().size() == 2);
    CHECK(file.at("linear.weight").shape == std::vector<int64_t>{1, 12});
    CHECK(file.at("linear.bias").shape == std::vector<int64_t>{1});
    CHECK(file.at("linear.weight").dtype == safetensors::DType::kF32);
    const auto& meta = file.metadata();
    CHECK(meta.at("model_class") == "BinaryLinearProbe");
    CHECK(meta.at("input_dim") == "12");
    CHECK(meta.at("label") == label);
    CHECK(meta.at("layer") == "7");
    CHECK(meta.at("epoch") == std::to_string(entry.at("best_epoch").get<int64_t>()));
    CHECK(std::stod(meta.at("val_auc")) == entry.at("val_auc").get<double>());
    CHECK(std::stod(meta.at("threshold")) == doctest::Approx(entry.at("threshold").get<double>()).epsilon(1e-12));
    double logit = std::stod(meta.at("threshold_logit"));
    CHECK(1.0 / (1.0 + std::exp(-logit)) == doctest::Approx(std::stod(meta.at("threshold"))).epsilon(1e-12));
    CHECK(path_exists(run.output_dir + "/metrics_" + label + ".json"));
  }
  Json aggregate = read_json_file(run.output_dir + "/aggregate_metrics.json");
  for (const char* key : {"average_auc_roc", "average_f1", "average_accuracy", "average_precision", "average_recall",
                          "total_training_time_seconds", "per_action_metrics"}) {
    CHECK_MESSAGE(aggregate.contains(key), key);
  }
}

TEST_CASE("multi-head probe files: encoder.0/3, attention.in_proj/out_proj, classifier") {
  probekit::testing::TempDir dir;
  BinaryRunOptions run = small_run(write_small_file(dir.path(), 2), dir.path() + "/out");
  run.training.kind = &probe_kind("multihead");
  run_binary_training(run);
  safetensors::File file(run.output_dir + "/probe_label_01.safetensors");
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"encoder.0.weight", {16, 12}},          {"encoder.0.bias", {16}},
      {"encoder.3.weight", {16, 16}},          {"encoder.3.bias", {16}},
      {"attention.in_proj_weight", {48, 16}},  {"attention.in_proj_bias", {48}},
      {"attention.out_proj.weight", {16, 16}}, {"attention.out_proj.bias", {16}},
      {"classifier.weight", {1, 16}},          {"classifier.bias", {1}}};
  REQUIRE(file.tensors().size() == expected.size());
  for (const auto& entry : expected) {
    const auto& name = entry.first;
    const auto& shape = entry.second;
    INFO(name);
    CHECK(file.at(name).shape == shape);
    CHECK(file.at(name).dtype == safetensors::DType::kF32);
  }
  CHECK(file.metadata().at("model_class") == "BinaryMultiHeadProbe");
  CHECK(file.metadata().at("hidden_dim") == "16");
  CHECK(file.metadata().at("num_heads") == "8");
}

TEST_CASE("a probes directory loads back and reproduces the logits stored at training time") {
  probekit::testing::TempDir dir;
  for (const ProbeKind* kind : {&probe_kind("linear"), &probe_kind("multihead")}) {
    BinaryRunOptions run = small_run(write_small_file(dir.path()), dir.path() + "/out_" + kind->name());
    run.training.kind = kind;
    run_binary_training(run);
    ProbeSet set = ProbeSet::load(run.output_dir, at::kCPU, at::kFloat);
    REQUIRE(set.probes().size() == 4);
    CHECK(set.probes()[2].label == "label_02");
    CHECK(set.layer() == 7);
    safetensors::File check(run.output_dir + "/logits_check.safetensors");
    const auto& inputs_info = check.at("inputs");
    const auto& logits_info = check.at("logits");
    at::Tensor inputs = at::from_blob(const_cast<uint8_t*>(check.data(inputs_info)), inputs_info.shape, at::kFloat);
    at::Tensor stored = at::from_blob(const_cast<uint8_t*>(check.data(logits_info)), logits_info.shape, at::kFloat);
    at::Tensor logits = set.logits(inputs);
    INFO(kind->name() << ": stored " << stored[0] << " loaded " << logits[0]);
    CHECK(at::allclose(logits, stored, 1e-5, 1e-6));
  }
}

TEST_CASE("fuzz regression (fuzz_probe_files): a damaged probes.json is refused before the bank is allocated") {
  // num_heads 0 divided by zero in the probe bank, an input_dim of 10^12 allocated terabytes before any probe
  // file was read, and an entry could name a file outside the directory.
  probekit::testing::TempDir dir;
  BinaryRunOptions run = small_run(write_small_file(dir.path()), dir.path() + "/out");
  run_binary_training(run);
  const std::string index_path = run.output_dir + "/probes.json";
  const Json index = read_json_file(index_path);
  auto load_error = [&](const Json& damaged) -> std::string {
    write_json_file(index_path, damaged);
    try {
      ProbeSet::load(run.output_dir, at::kCPU, at::kFloat);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    FAIL("expected " << damaged.dump() << " to be refused");
    return "";
  };
  Json no_heads = index;
  no_heads["model_type"] = "multihead";
  no_heads["hidden_dim"] = 16;
  no_heads["num_heads"] = 0;
  CHECK_CONTAINS(load_error(no_heads), "probes.json: input_dim 12, hidden_dim 16 and num_heads 0 do not describe a multihead probe");
  Json huge = index;
  huge["input_dim"] = int64_t{1000000000000};
  CHECK_CONTAINS(load_error(huge), "probe_label_00.safetensors: tensor 'linear.weight' has shape [1, 12], expected [1, 1000000000000]");
  Json outside = index;
  outside["probes"][0]["file"] = "../out/probe_label_00.safetensors";
  CHECK_CONTAINS(load_error(outside), "probe file '../out/probe_label_00.safetensors' must name a file inside the directory");
}

TEST_CASE("--dtype bf16 trains and saves bf16 probes") {
  probekit::testing::TempDir dir;
  BinaryRunOptions run = small_run(write_small_file(dir.path()), dir.path() + "/out");
  run.dtype = "bf16";
  run_binary_training(run);
  safetensors::File file(run.output_dir + "/probe_label_00.safetensors");
  CHECK(file.at("linear.weight").dtype == safetensors::DType::kBF16);
  CHECK(read_json_file(run.output_dir + "/probes.json").at("dtype") == "bfloat16");
  ProbeSet set = ProbeSet::load(run.output_dir, at::kCPU, at::kFloat);
  CHECK(set.probes().size() == 4);
}

TEST_CASE("multiclass probe files: linear.weight [C, H] and the reference's metadata") {
  probekit::testing::TempDir dir;
  MulticlassRunOptions run;
  run.activations = write_small_file(dir.path(), 5);
  run.output_dir = dir.path() + "/out";
  run.device = "cpu";
  run.training.epochs = 2;
  run_multiclass_training(run);
  for (const char* name : {"best_probe.safetensors", "final_probe.safetensors"}) {
    safetensors::File file(run.output_dir + "/" + name);
    CHECK(file.at("linear.weight").shape == std::vector<int64_t>{5, 12});
    CHECK(file.at("linear.bias").shape == std::vector<int64_t>{5});
    CHECK(file.metadata().at("model_class") == "LinearProbe");
    CHECK(file.metadata().at("num_classes") == "5");
  }
  safetensors::File best(run.output_dir + "/best_probe.safetensors");
  CHECK(best.metadata().count("val_accuracy") == 1);
  CHECK(best.metadata().count("epoch") == 1);
  safetensors::File final_probe(run.output_dir + "/final_probe.safetensors");
  CHECK(final_probe.metadata().count("test_accuracy") == 1);

  // probes.json tells inference which file to run, its classes and how the activations were made.
  Json index = read_json_file(run.output_dir + "/probes.json");
  CHECK(index.at("format") == "probekit.multiclass_probe");
  CHECK(index.at("file") == "best_probe.safetensors");
  CHECK(index.at("num_classes") == 5);
  CHECK(index.at("labels") == Json::parse(best.metadata().at("label_names")));
  CHECK(index.at("layer") == 7);
  for (const char* key : {"model_name", "model_fingerprint", "site", "position", "prompt_suffix", "max_length"}) {
    CHECK_MESSAGE(index.at("readout").contains(key), key);
  }
  ProbeSet set = ProbeSet::load(run.output_dir, at::kCPU, at::kFloat);
  CHECK(set.multiclass());
  REQUIRE(set.probes().size() == 5);
  CHECK(set.probes()[3].label == "label_03");
  CHECK(std::isnan(set.probes()[3].val_auc));
  at::Tensor probabilities = set.probabilities(at::randn({4, 12}));
  CHECK(probabilities.sizes() == at::IntArrayRef({4, 5}));
  CHECK(at::allclose(probabilities.sum(1), at::ones({4})));

  Json damaged = index;
  damaged["labels"].erase(0);
  write_json_file(run.output_dir + "/probes.json", damaged);
  CHECK_THROWS_WITH(ProbeSet::load(run.output_dir, at::kCPU, at::kFloat),
                    doctest::Contains("probes.json: lists 4 labels for a probe of 5 classes"));
  damaged = index;
  std::swap(damaged["labels"][0], damaged["labels"][1]);
  write_json_file(run.output_dir + "/probes.json", damaged);
  CHECK_THROWS_WITH(ProbeSet::load(run.output_dir, at::kCPU, at::kFloat),
                    doctest::Contains("best_probe.safetensors: its label_names differ from the labels"));
}

TEST_CASE("train_binary_probes reports bad activation files clearly and exits 1") {
  probekit::testing::TempDir dir;
  auto variant = [&](const std::string& name, const std::function<void(hid_t)>& damage) {
    std::string path = dir.path() + "/" + name + "/layer_7_activations.h5";
    make_directories(dir.path() + "/" + name);
    SyntheticActivations spec = uniform_synthetic(3, {10, 4, 4}, 6);
    spec.layer = 7;
    write_synthetic_activation_file(path, spec);
    hdf5::Handle file = hdf5::open_file(path, true);
    damage(file.get());
    return path;
  };
  auto group = [](hid_t file, const char* name) { return std::move(*hdf5::open_group(file, name)); };
  struct Case {
    std::string name, expected;
    std::string path;
  };
  std::vector<Case> cases;
  cases.push_back({"missing_group", "missing group 'test'", variant("missing_group", [](hid_t f) {
                     H5Ldelete(f, "test", H5P_DEFAULT);
                   })});
  cases.push_back({"missing_dataset", "missing dataset 'labels'", variant("missing_dataset", [&](hid_t f) {
                     H5Ldelete(group(f, "val").get(), "labels", H5P_DEFAULT);
                   })});
  cases.push_back({"shape_mismatch", "shape mismatch between activations and labels",
                   variant("shape_mismatch", [&](hid_t f) {
                     hdf5::Handle val = group(f, "val");
                     H5Ldelete(val.get(), "labels", H5P_DEFAULT);
                     std::vector<int64_t> labels = {0, 1, 2};
                     hdf5::Handle d = hdf5::create_dataset(val.get(), "labels", H5T_STD_I64LE, {3}, hdf5::Storage{{3}, false, false});
                     hdf5::write_rows(d.get(), H5T_NATIVE_INT64, 0, 3, labels.data());
                   })});
  cases.push_back({"label_outside", "label 9 at row 1 is outside the 3 label names",
                   variant("label_outside", [&](hid_t f) {
                     hdf5::Handle train = group(f, "train");
                     int64_t label = 9;
                     hdf5::write_rows(hdf5::open_dataset(train.get(), "labels")->get(), H5T_NATIVE_INT64, 1, 1, &label);
                   })});
  cases.push_back({"nan", "is nan", variant("nan", [&](hid_t f) {
                     hdf5::Handle test = group(f, "test");
                     std::vector<float> row(6, std::numeric_limits<float>::quiet_NaN());
                     hdf5::write_rows(hdf5::open_dataset(test.get(), "activations")->get(), H5T_NATIVE_FLOAT, 2, 1,
                                      row.data());
                   })});
  for (const Case& c : cases) {
    ToolResult result = run_tool_process("train_binary_probes",
                                         "--activations " + c.path + " --output-dir " + dir.path() + "/out_" + c.name,
                                         dir.path() + "/" + c.name + ".log");
    INFO(c.name << ": exit " << result.exit_code << ", log:\n" << result.log);
    CHECK(result.exit_code == 1);
    CHECK(result.log.find(c.expected) != std::string::npos);
    CHECK(result.log.find(c.path) != std::string::npos);
  }
}

TEST_CASE("the training tools: usage errors exit 2, a label without positives is skipped with a warning") {
  probekit::testing::TempDir dir;
  std::string activations = write_small_file(dir.path());
  ToolResult unknown = run_tool_process("train_binary_probes",
                                        "--activations " + activations + " --labels label_01,nope --output-dir " +
                                            dir.path() + "/a",
                                        dir.path() + "/unknown.log");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.log.find("unknown label 'nope'") != std::string::npos);

  for (const char* tool : {"train_binary_probes", "train_probes"}) {
    ToolResult bad_lr = run_tool_process(tool, "--activations " + activations + " --lr inf --output-dir " + dir.path() + "/lr",
                                         dir.path() + "/lr.log");
    INFO(tool << ": " << bad_lr.log);
    CHECK(bad_lr.exit_code == 2);
    CHECK(bad_lr.log.find("--lr must be finite and positive, got inf") != std::string::npos);
    CHECK(!path_exists(dir.path() + "/lr"));  // refused before any work
  }

  SyntheticActivations spec = uniform_synthetic(3, {12, 4, 4}, 6);
  spec.examples[1] = {0, 4, 4};
  make_directories(dir.path() + "/skip");
  write_synthetic_activation_file(dir.path() + "/skip/layer_0_activations.h5", spec);
  ToolResult skipped = run_tool_process("train_binary_probes",
                                        "--activations " + dir.path() + "/skip --epochs 2 --json --output-dir " + dir.path() +
                                            "/b",
                                        dir.path() + "/skip.log");
  INFO(skipped.log);
  CHECK(skipped.exit_code == 0);
  CHECK(skipped.log.find("label 'label_01' skipped: no positive example in the train split") != std::string::npos);
  Json aggregate = read_json_file(dir.path() + "/b/aggregate_metrics.json");
  CHECK(aggregate.at("skipped_labels").at(0).at("label") == "label_01");
  CHECK(!path_exists(dir.path() + "/b/probe_label_01.safetensors"));

  ToolResult multiclass = run_tool_process("train_probes",
                                           "--activations " + activations + " --epochs 1 --output-dir " + dir.path() + "/c",
                                           dir.path() + "/multiclass.log");
  CHECK(multiclass.exit_code == 0);
  CHECK(path_exists(dir.path() + "/c/test_metrics.json"));
}

TEST_CASE("labels without any example: no probe and one log line for all layer files; train_probes keeps their outputs") {
  // A file of the reference's cognitive-action datasets lists all 45 actions whatever subset it holds.
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(5, {12, 4, 4}, 6);
  spec.examples[1] = {0, 0, 0};
  spec.examples[3] = {0, 0, 0};
  make_directories(dir.path() + "/acts");
  for (int64_t layer : {0, 1}) {
    spec.layer = layer;
    write_synthetic_activation_file(dir.path() + "/acts/" + activations::layer_file_name(layer), spec);
  }
  ToolResult binary = run_tool_process("train_binary_probes",
                                       "--activations " + dir.path() + "/acts --epochs 2 --output-dir " + dir.path() + "/b",
                                       dir.path() + "/binary.log");
  INFO(binary.log);
  CHECK(binary.exit_code == 0);
  CHECK(binary.log.find("layer_0_activations.h5 (and 1 more layer file): 2 labels have no example and get no probe: "
                        "label_01, label_03") != std::string::npos);
  CHECK(binary.log.find("have no example") == binary.log.rfind("have no example"));  // once
  CHECK(binary.log.find("skipped") == std::string::npos);
  Json aggregate = read_json_file(dir.path() + "/b/layer_1/aggregate_metrics.json");
  CHECK(aggregate.at("num_probes") == 3);
  CHECK(aggregate.at("labels_without_examples") == Json({"label_01", "label_03"}));
  CHECK(!path_exists(dir.path() + "/b/layer_1/probe_label_01.safetensors"));
  // Only labels without examples selected: the refusal says why each was left out.
  ToolResult none = run_tool_process("train_binary_probes",
                                     "--activations " + dir.path() + "/acts --epochs 2 --labels label_01,label_03 "
                                     "--output-dir " + dir.path() + "/none",
                                     dir.path() + "/none.log");
  CHECK(none.exit_code == 1);
  CHECK_MESSAGE(none.log.find("no label can be trained: 'label_01' has no example; 'label_03' has no example") !=
                    std::string::npos,
                none.log);

  ToolResult multiclass = run_tool_process("train_probes",
                                           "--activations " + dir.path() + "/acts/layer_0_activations.h5 --epochs 1 "
                                           "--output-dir " + dir.path() + "/c",
                                           dir.path() + "/multiclass.log");
  INFO(multiclass.log);
  CHECK(multiclass.exit_code == 0);
  CHECK(multiclass.log.find("2 of the 5 labels have no example; their outputs are never trained: label_01, label_03") !=
        std::string::npos);
  safetensors::File best(dir.path() + "/c/best_probe.safetensors");
  CHECK(best.metadata().at("num_classes") == "5");
}

TEST_CASE("attention probe files: position_weight, q, v; the directory loads back and reproduces the stored logits") {
  probekit::testing::TempDir dir;
  SyntheticActivations spec = uniform_synthetic(3, {12, 6, 6}, 12);
  spec.layer = 7;
  spec.signal.assign(3, 4.0);
  spec.min_tokens = 4;
  spec.max_tokens = 9;
  const std::string path = dir.path() + "/layer_7_activations.h5";
  write_synthetic_activation_file(path, spec);
  BinaryRunOptions run = small_run(path, dir.path() + "/out");
  run.training.kind = &probe_kind("attention");
  run.training.heads = 2;
  run.training.max_tokens = 6;
  run_binary_training(run);

  safetensors::File file(run.output_dir + "/probe_label_01.safetensors");
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"position_weight", {2}}, {"q.weight", {2, 12}}, {"v.weight", {2, 12}}, {"v.bias", {2}}};
  REQUIRE(file.tensors().size() == expected.size());
  for (const auto& [name, shape] : expected) CHECK(file.at(name).shape == shape);
  CHECK(file.metadata().at("model_class") == "AttentionProbe");
  CHECK(file.metadata().at("num_heads") == "2");
  CHECK(file.metadata().at("max_tokens") == "6");
  CHECK(file.metadata().at("skip_leading") == "1");
  CHECK(file.metadata().at("dropout") == "0");
  Json index = read_json_file(run.output_dir + "/probes.json");
  CHECK(index.at("readout").at("position") == "all");
  CHECK(index.at("num_heads") == 2);

  ProbeSet set = ProbeSet::load(run.output_dir, at::kCPU, at::kFloat);
  safetensors::File check(run.output_dir + "/logits_check.safetensors");
  auto offsets = parse_json(check.metadata().at("offsets"), "offsets").get<std::vector<int64_t>>();
  const auto& inputs_info = check.at("inputs");
  const auto& logits_info = check.at("logits");
  at::Tensor inputs = at::from_blob(const_cast<uint8_t*>(check.data(inputs_info)), inputs_info.shape, at::kFloat);
  at::Tensor stored = at::from_blob(const_cast<uint8_t*>(check.data(logits_info)), logits_info.shape, at::kFloat);
  // The stored inputs are the rows the probes read (after the BOS, at most 6): read as they are, they score the
  // same only where nothing more is cut, so score the test texts' full rows from the file instead.
  const activations::ActivationFile activation_file = activations::read_activation_file(path);
  const activations::SplitData& test = activation_file.split(activations::Split::kTest);
  const int64_t texts = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<int64_t> full(test.offsets.begin(), test.offsets.begin() + texts + 1);
  at::Tensor rows = at::from_blob(const_cast<float*>(test.activations.data()), {full.back(), 12}, at::kFloat);
  CHECK(at::allclose(set.token_logits(rows, full), stored, 1e-5, 1e-6));
  CHECK(inputs.size(0) == offsets.back());
  CHECK_THROWS_WITH(set.logits(rows), doctest::Contains("score them with token_logits"));
}
