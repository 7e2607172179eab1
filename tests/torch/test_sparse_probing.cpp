// Sparse probing (--model-type sparse-logistic --k K) on latent-like rows: each probe keeps the columns whose class
// means differ the most, fits on those only, and names them in its metrics; on a planted concept it finds the planted
// latents. Also training straight from an SAE capture (sparse storage densified on reading), and those probes scoring
// text through the same SAE.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/memory_capture.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "inference/engine.h"
#include "io/safetensors.h"
#include "probes/binary_run.h"
#include "probe_fixture.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::probes;
using namespace probekit::testing;

namespace {

constexpr int64_t kLatents = 256;
const std::vector<int64_t> kPlanted = {17, 200, 63};

// Rows like an SAE's latents (never negative, 8 random ones active a row); label "concept" also fires the planted
// latents (17 strongest, then 200 and 63), label "other" does not.
void write_planted_file(const std::string& path) {
  activations::FileAttributes attributes;
  attributes.label_names = {"concept", "other"};
  attributes.layers = {0};
  attributes.layer = 0;
  attributes.hidden_size = kLatents;
  attributes.recipe.dtype = "fp32";
  std::array<activations::SplitLayout, 3> layouts;
  const std::array<int64_t, 3> counts = {120, 40, 40};
  for (size_t s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < counts[s]; ++i) {
      layouts[s].labels.push_back(i % 2);
      layouts[s].example_index.push_back(static_cast<int64_t>(s) * 1000 + i);
    }
  }
  auto writer = activations::ActivationWriter::create(path, attributes, layouts, false);
  std::mt19937 random(7);
  std::exponential_distribution<float> strength(1.0f);
  std::uniform_int_distribution<int64_t> latent(0, kLatents - 1);
  int64_t done = 0;
  for (size_t s = 0; s < 3; ++s) {
    std::vector<float> rows(static_cast<size_t>(counts[s] * kLatents), 0.0f);
    for (int64_t i = 0; i < counts[s]; ++i) {
      float* row = rows.data() + i * kLatents;
      for (int j = 0; j < 8; ++j) row[latent(random)] += strength(random);
      if (layouts[s].labels[static_cast<size_t>(i)] == 0) {
        row[kPlanted[0]] += 3.0f + strength(random);
        row[kPlanted[1]] += 2.0f + strength(random);
        row[kPlanted[2]] += 1.5f + strength(random);
      }
    }
    writer.write_rows(static_cast<activations::Split>(s), 0, counts[s], rows.data());
    done += counts[s];
    writer.commit(done);
  }
  writer.finish();
}

BinaryRunOptions sparse_run(const std::string& activations, const std::string& output, int64_t k) {
  BinaryRunOptions o = cpu_binary_run(activations, output, 1);
  o.kinds = {&probe_kind("sparse-logistic")};
  o.training.kind = o.kinds.front();
  o.training.sparse_k = k;
  return o;
}

std::string find_file(const std::string& dir, const std::string& name) {
  for (const std::string& entry : list_directory(dir)) {
    const std::string path = dir + "/" + entry;
    if (entry == name) return path;
    if (is_directory(path)) {
      const std::string found = find_file(path, name);
      if (!found.empty()) return found;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("sparse-logistic keeps the k latents that separate a planted concept and names them in its metrics") {
  TempDir tmp;
  write_planted_file(tmp.file("layer_0_activations.h5"));
  run_binary_training(sparse_run(tmp.file("layer_0_activations.h5"), tmp.file("out"), 3));
  const std::string metrics_path = find_file(tmp.file("out"), "metrics_concept.json");
  REQUIRE_FALSE(metrics_path.empty());
  const Json metrics = read_json_file(metrics_path);
  INFO(metrics.dump());
  REQUIRE(metrics.contains("features"));
  const Json& features = metrics["features"];
  REQUIRE(features.size() == 3);
  std::vector<int64_t> kept;
  for (const Json& feature : features) kept.push_back(feature["index"].get<int64_t>());
  std::sort(kept.begin(), kept.end());
  const std::vector<int64_t> planted = {17, 63, 200};
  CHECK(kept == planted);
  // Largest weight first; the concept raises them all, so each weight is positive.
  CHECK(features[0]["weight"].get<double>() >= features[2]["weight"].get<double>());
  for (const Json& feature : features) CHECK(feature["weight"].get<double>() > 0);
  CHECK(metrics["auc_roc"].get<double>() > 0.95);
  const Json index = read_json_file(find_file(tmp.file("out"), "probes.json"));
  CHECK(index.dump().find("\"k\":3") != std::string::npos);
}

TEST_CASE("sparse-logistic refuses a k below 1, naming --k, and says when k passes the width") {
  TempDir tmp;
  write_planted_file(tmp.file("layer_0_activations.h5"));
  CHECK_THROWS_WITH_AS(run_binary_training(sparse_run(tmp.file("layer_0_activations.h5"), tmp.file("out"), 0)),
                       doctest::Contains("--k must be positive, got 0"), UsageError);
  // Regression: a k past the width trained plain logistic probes without a word.
  LoggedLines log;
  run_binary_training(sparse_run(tmp.file("layer_0_activations.h5"), tmp.file("wide"), kLatents + 1));
  CHECK_CONTAINS(log.text(), "--k 257 is more than the activations' 256 columns: every column is kept");
}

TEST_CASE("probes train on an SAE capture stored sparse, densified as it is read") {
  TempDir tmp;
  capture::CaptureOptions o = three_action_capture(tmp, 60, "cpu");
  o.saes = {{"topk", std::string(PROBEKIT_FIXTURES) + "/saes/saelens_topk"}};
  o.sae_site = parse_sae_site("sae:topk");
  o.sae_storage.top_k = 16;
  o.output_dir = tmp.file("latents");
  o.layers = "";
  const capture::CaptureSummary summary = capture::run_capture(o);
  const std::vector<int64_t> sae_layer = {3};
  CHECK(summary.layers == sae_layer);
  const Json result = run_binary_training(sparse_run(tmp.file("latents"), tmp.file("probes"), 4));
  const Json index = read_json_file(find_file(tmp.file("probes"), "probes.json"));
  INFO(index.dump());
  CHECK(index.dump().find("sae:topk") != std::string::npos);
}

namespace {

// Each packed sparse row [ids (K), values (K), l0, relative error] as the dense row it stands for [d_sae].
at::Tensor densified(const at::Tensor& packed, int64_t top_k, int64_t width) {
  const at::Tensor ids = packed.narrow(1, 0, top_k).to(at::kLong);
  const at::Tensor held = ids >= 0;
  return at::zeros({packed.size(0), width}).scatter_(1, ids.clamp_min(0), packed.narrow(1, top_k, top_k) * held);
}

}  // namespace

TEST_CASE("probes trained on an SAE site score text through the same SAE, its top k kept as the file kept them" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  const std::string topk = std::string(PROBEKIT_FIXTURES) + "/saes/saelens_jumprelu";
  capture::CaptureOptions o = three_action_capture(tmp, 60, "cpu");
  o.saes = {{"jr", topk}};
  o.sae_site = parse_sae_site("sae:jr");
  o.sae_storage.top_k = 16;
  o.output_dir = tmp.file("latents");
  capture::run_capture(o);
  BinaryRunOptions run = sparse_run(tmp.file("latents"), tmp.file("probes"), 4);
  run.kinds = {&probe_kind("logistic")};
  run.training.kind = run.kinds.front();
  run_binary_training(run);

  inference::EngineOptions options = cpu_engine_options(tmp.file("probes"));
  options.saes = {{"jr", topk}};
  const inference::Engine engine = inference::Engine::load(options);
  const std::string text = "I examined each part of the problem step by step. Day 3.";
  const std::vector<inference::TextScores> scores = engine.score({text});
  // The row capture reads for the text: its top 16 latents, densified.
  capture::CaptureOptions in_memory;
  in_memory.saes = o.saes;
  in_memory.sae_site = o.sae_site;
  in_memory.sae_storage.top_k = 16;
  const loading::SharedModel model = [] {
    loading::ModelRequest request;
    request.model_dir = kGemmaModel;
    request.device = "cpu";
    return loading::load_shared_model(request);
  }();
  const at::Tensor h = densified(capture::capture_rows(model, {text}, in_memory).rows[0], 16, 256)[0].to(at::kDouble);
  for (size_t k = 0; k < engine.labels().size(); ++k) {
    const std::string& label = engine.labels()[k];
    CAPTURE(label);
    const std::string probe = find_file(tmp.file("probes"), "probe_" + label + ".safetensors");
    REQUIRE_FALSE(probe.empty());
    const safetensors::File file(probe);
    const at::Tensor w = read_tensor(file, file.at("linear.weight")).to(at::kDouble)[0];
    const double b = read_tensor(file, file.at("linear.bias")).to(at::kDouble)[0].item<double>();
    const double expected = 1.0 / (1.0 + std::exp(-((w * h).sum().item<double>() + b)));
    CHECK(std::fabs(scores[0].probability[0][k] - expected) < 1e-5);
  }

  options.saes.clear();
  CHECK_THROWS_WITH_AS(inference::Engine::load(options), doctest::Contains("load it with --sae jr=PATH"), UsageError);
  options.saes = {{"jr", std::string(PROBEKIT_FIXTURES) + "/saes/saelens_standard"}};
  CHECK_THROWS_WITH_AS(inference::Engine::load(options),
                       doctest::Contains("made with an SAE whose architecture is \"jumprelu\"; --sae jr has \"standard\""),
                       std::invalid_argument);
  // The same dictionary elsewhere serves; one of the same layout and widths with other weights does not (regression:
  // only the layout and widths were compared).
  copy_dir(topk, tmp.file("moved"));
  options.saes = {{"jr", tmp.file("moved")}};
  CHECK(inference::Engine::load(options).labels() == engine.labels());
  copy_dir(topk, tmp.file("retrained"));
  set_first_element(tmp.file("retrained/sae_weights.safetensors"), "W_enc", 0.5F);
  options.saes = {{"jr", tmp.file("retrained")}};
  CHECK_THROWS_WITH_AS(inference::Engine::load(options), doctest::Contains("made with an SAE whose fingerprint is"),
                       std::invalid_argument);
}
