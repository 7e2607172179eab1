// capture_activations on a fixture model: the file layout, rows equal to single forward passes, positions and
// sites, the router and experts sites of the MoE families (test_capture_runs.cpp: runs as a whole, interrupted,
// refused).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "common/error.h"
#include "common/files.h"
#include "capture/capture.h"
#include "capture/merge.h"
#include "common/json.h"
#include "data/splits.h"
#include "activations/activation_store.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "activation_checks.h"
#include "capture_dataset.h"
#include "capture_runs.h"
#include "tensor_files.h"
#include "test_paths.h"
#include "data/reference_labels.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::testing;
using activations::Split;

namespace {

// Routed experts (top 2 of 8) on layers 0, 2 and 3; layer 1 is a dense MLP (mlp_only_layers).
const std::string kMoeModel = fixture_model("qwen3_moe");

}  // namespace

TEST_CASE("capture writes the reference's layout plus our extensions") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 40);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("out"));
  o.dataset.keep_fields = {"domain"};
  capture::CaptureSummary s = capture::run_capture(o);
  CHECK(s.layers == std::vector<int64_t>{1, 3, 4, 5});  // n/4, n/2, 3n/4, n-1 of 6 layers
  CHECK(s.examples == 40);
  REQUIRE(s.files.size() == 4);
  CHECK(s.computed_tokens >= s.tokens);  // the batches' padding on top of the tokens

  // Splits: the reference's stratified membership, rows in split order. A cognitive-action dataset's labels
  // index the reference's 45 actions, whatever subset it holds, as the reference indexes them.
  data::Dataset d = data::read_dataset(dataset, o.dataset);
  std::vector<std::string> labels;
  for (const auto& e : d.examples) labels.push_back(e.label);
  auto expected = data::stratified_split(labels, {}, 42);
  auto file = activations::read_activation_file(s.files[2]);
  CHECK(file.attributes.layer == 4);
  CHECK(file.attributes.layers == std::vector<int64_t>{1, 3, 4, 5});
  CHECK(file.attributes.label_names == data::reference_label_names());
  CHECK(file.attributes.hidden_size == 64);
  CHECK(file.attributes.recipe.prompt_suffix == activations::kDefaultPromptSuffix);
  CHECK(file.attributes.recipe.position == Position::kLast);
  CHECK(file.attributes.recipe.site == Site::kResidPost);
  CHECK(file.attributes.recipe.dtype == "fp32");
  CHECK(file.attributes.dataset_sha256.size() == 64);
  for (Split split : activations::kSplits) {
    const auto& group = file.split(split);
    const auto& members = expected[static_cast<size_t>(split)];
    REQUIRE(group.examples() == static_cast<int64_t>(members.size()));
    CHECK(group.rows == group.examples());
    for (size_t i = 0; i < members.size(); ++i) {
      CHECK(group.example_index[i] == d.examples[static_cast<size_t>(members[i])].line);
      CHECK(group.labels[i] == d.labels[static_cast<size_t>(members[i])]);
      CHECK(group.metadata.at("domain")[i] == d.examples[static_cast<size_t>(members[i])].kept[0]);
    }
  }
  CHECK_FALSE(path_exists(s.files[0] + ".partial"));
}

TEST_CASE("captured last-token rows equal single forward passes of each text") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 24);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("out"));
  o.layers = "2,5";
  capture::CaptureSummary s = capture::run_capture(o);
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  auto m = model::TransformerModel::load(kGemmaModel, {});
  data::Dataset d = data::read_dataset(dataset, {});
  for (size_t f = 0; f < 2; ++f) {
    auto file = activations::read_activation_file(s.files[f]);
    int64_t layer = file.attributes.layer;
    for (Split split : activations::kSplits) {
      const auto& group = file.split(split);
      for (int64_t row = 0; row < group.examples(); ++row) {
        const std::string& text = d.examples[static_cast<size_t>(group.example_index[static_cast<size_t>(row)])].text;
        std::vector<int32_t> ids = tok.encode(text + activations::kDefaultPromptSuffix);
        model::ForwardPass pass;
        pass.input_ids = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
        pass.last_layer = layer;
        at::Tensor expected = m.forward(pass)[0][-1];
        at::Tensor actual = at::from_blob(const_cast<float*>(group.activations.data()) + row * 64, {64}, at::kFloat);
        double error = (actual - expected).abs().max().item<double>() / expected.abs().max().item<double>();
        CHECK_MESSAGE(error < 1e-5, "layer ", layer, " split ", activations::split_name(split), " row ", row);
      }
    }
  }
}

TEST_CASE("captured rows equal inspect_model hidden for the same texts") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("out"));
  o.layers = "3";
  auto file = activations::read_activation_file(capture::run_capture(o).files[0]);
  data::Dataset d = data::read_dataset(dataset, {});
  const auto& test = file.split(Split::kTest);
  REQUIRE(test.examples() > 0);
  std::string text = d.examples[static_cast<size_t>(test.example_index[0])].text + activations::kDefaultPromptSuffix;
  std::string text_file = tmp.file("text.txt");
  probekit::testing::write_text(text_file, text);
  CommandResult r = run_command(fmt::format("{} hidden --model {} --device cpu --output {} --text \"$(cat {})\"",
                                            tool("inspect_model"), kGemmaModel, tmp.file("h.safetensors"), text_file));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  safetensors::File hidden(tmp.file("h.safetensors"));
  at::Tensor layers = testing::read_tensor(hidden, hidden.at("layers"));  // [L, T, H]
  CHECK(layers.size(0) == 6);
  CHECK(testing::read_tensor(hidden, hidden.at("input_ids")).size(0) == layers.size(1));
  at::Tensor expected = layers[3][-1];
  at::Tensor actual = at::from_blob(const_cast<float*>(test.activations.data()), {64}, at::kFloat);
  CHECK((actual - expected).abs().max().item<double>() <= 1e-5 * expected.abs().max().item<double>());
}

TEST_CASE("positions all, mean and max, and the sites of a layer") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  auto capture_with = [&](Position position, Site site, const std::string& name) {
    capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file(name));
    o.layers = "2,3";
    o.position = position;
    o.site = site;
    return activations::read_activation_file(capture::run_capture(o).files[0]);
  };
  auto all = capture_with(Position::kAll, Site::kResidPost, "all");
  auto mean = capture_with(Position::kMean, Site::kResidPost, "mean");
  auto max = capture_with(Position::kMax, Site::kResidPost, "max");
  auto last = capture_with(Position::kLast, Site::kResidPost, "last");
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  data::Dataset d = data::read_dataset(dataset, {});
  const auto& tokens = all.split(Split::kTrain);
  REQUIRE(tokens.offsets.size() == static_cast<size_t>(tokens.examples() + 1));
  for (int64_t e = 0; e < tokens.examples(); ++e) {
    int64_t first = tokens.offsets[static_cast<size_t>(e)], end = tokens.offsets[static_cast<size_t>(e) + 1];
    std::vector<int32_t> ids = tok.encode(d.examples[static_cast<size_t>(tokens.example_index[static_cast<size_t>(e)])].text +
                                          activations::kDefaultPromptSuffix);
    REQUIRE(end - first == static_cast<int64_t>(ids.size()));
    for (int64_t t = first; t < end; ++t) CHECK(tokens.token_ids[static_cast<size_t>(t)] == ids[static_cast<size_t>(t - first)]);
    at::Tensor rows = at::from_blob(const_cast<float*>(tokens.activations.data()) + first * 64, {end - first, 64}, at::kFloat);
    auto row_of = [&](const activations::ActivationFile& f) {
      return at::from_blob(const_cast<float*>(f.split(Split::kTrain).activations.data()) + e * 64, {64}, at::kFloat);
    };
    // BOS (the first token) is left out of the mean and the max.
    CHECK((rows.narrow(0, 1, end - first - 1).mean(0) - row_of(mean)).abs().max().item<double>() < 1e-5);
    CHECK((rows.narrow(0, 1, end - first - 1).amax(0) - row_of(max)).abs().max().item<double>() < 1e-6);
    CHECK((rows[end - first - 1] - row_of(last)).abs().max().item<double>() < 1e-5);
  }
  // The input of layer 3 is the output of layer 2.
  auto pre3 = [&] {
    capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file("pre"));
    o.layers = "3";
    o.site = Site::kResidPre;
    return activations::read_activation_file(capture::run_capture(o).files[0]);
  }();
  CHECK(pre3.attributes.recipe.site == Site::kResidPre);
  const auto& a = pre3.split(Split::kVal).activations;
  const auto& b = last.split(Split::kVal).activations;
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
}

namespace {

// A float row of an activation file as a tensor.
at::Tensor file_row(const std::vector<float>& values, int64_t row, int64_t width) {
  return at::from_blob(const_cast<float*>(values.data()) + row * width, {width}, at::kFloat);
}

}  // namespace

TEST_CASE("router and experts sites: rows are the routing of single passes, dense layers are refused") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  auto capture_moe = [&](Site site, Position position, const std::string& layers, const std::string& out) {
    capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file(out));
    o.model_dir = kMoeModel;
    o.site = site;
    o.position = position;
    o.layers = layers;
    o.gzip = site == Site::kExperts;
    return capture::run_capture(o).files;
  };
  auto router_last = capture_moe(Site::kRouter, Position::kLast, "0,2", "router_last");
  auto router_all = activations::read_activation_file(capture_moe(Site::kRouter, Position::kAll, "2", "all")[0]);
  auto experts = activations::read_activation_file(capture_moe(Site::kExperts, Position::kLast, "3", "experts")[0]);
  std::vector<activations::ActivationFile> routers = {activations::read_activation_file(router_last[0]),
                                                      activations::read_activation_file(router_last[1])};
  CHECK(routers[0].attributes.recipe.site == Site::kRouter);
  CHECK(routers[0].attributes.hidden_size == 8);
  CHECK(experts.attributes.recipe.site == Site::kExperts);
  CHECK(experts.attributes.hidden_size == 2);

  auto m = model::TransformerModel::load(kMoeModel, {});
  auto tok = tokenizer::Tokenizer::from_file(kMoeModel);
  data::Dataset d = data::read_dataset(dataset, {});
  for (Split split : activations::kSplits) {
    const auto& all = router_all.split(split);
    for (int64_t e = 0; e < all.examples(); ++e) {
      const std::string& text = d.examples[static_cast<size_t>(all.example_index[static_cast<size_t>(e)])].text;
      // [router layers 0, 2, 3; T; 8]
      at::Tensor logits = readout::read_hidden_states(m, tok.encode(text + activations::kDefaultPromptSuffix)).router_logits;
      for (size_t f = 0; f < routers.size(); ++f) {
        at::Tensor last = file_row(routers[f].split(split).activations, e, 8);
        CHECK((last - logits[static_cast<int64_t>(f)][-1]).abs().max().item<double>() < 1e-5);
      }
      int64_t first = all.offsets[static_cast<size_t>(e)], end = all.offsets[static_cast<size_t>(e) + 1];
      at::Tensor tokens = at::from_blob(const_cast<float*>(all.activations.data()) + first * 8, {end - first, 8}, at::kFloat);
      CHECK((tokens - logits[1]).abs().max().item<double>() < 1e-5);
      // Layer 3 routes to the top 2 of the softmax, renormalised (norm_topk_prob).
      auto [weights, ids] = at::topk(at::softmax(logits[2][-1], -1), 2);
      const auto& chosen = experts.split(split);
      REQUIRE(chosen.expert_ids.size() == static_cast<size_t>(chosen.examples() * 2));
      CHECK(chosen.activations.empty());
      for (int64_t j = 0; j < 2; ++j) {
        CHECK(chosen.expert_ids[static_cast<size_t>(e * 2 + j)] == ids[j].item<int64_t>());
        CHECK(chosen.expert_weights[static_cast<size_t>(e * 2 + j)] ==
              doctest::Approx((weights[j] / weights.sum()).item<double>()).epsilon(1e-5));
      }
    }
  }

  // A layer without a router, and pooled expert ids, are the caller's mistakes, named as such.
  auto usage_error = [&](Site site, Position position, const std::string& layers) -> std::string {
    try {
      capture_moe(site, position, layers, "refused");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_CONTAINS(usage_error(Site::kRouter, Position::kLast, "1,2"),
                 "--site router: layer 1 is a dense layer without a router; the layers with a router are 0,2,3");
  CHECK_CONTAINS(usage_error(Site::kExperts, Position::kMean, "2"),
                 "--site experts stores the k experts the router chose (ids, most probable first) and their weights, which cannot be pooled: use --position last or all (not mean)");
  CHECK_CONTAINS(usage_error(Site::kRouter, Position::kLast, "1"), "the layers with a router are 0,2,3");
}

TEST_CASE("per-token expert choices of a run in two shards, merged, equal the unsharded run's") {
  TempDir tmp;
  std::string dataset = write_action_dataset(tmp, 16);
  // The weights to fp32 rounding: other batches pad differently.
  capture::CaptureOptions whole = cpu_capture_options(dataset, tmp.file("whole"));
  whole.model_dir = kMoeModel;
  whole.site = Site::kExperts;
  whole.position = Position::kAll;
  whole.layers = "0";
  auto unsharded = activations::read_activation_file(capture::run_capture(whole).files[0]);
  whole.output_dir = tmp.file("sharded");
  for (int shard = 0; shard < 2; ++shard) {
    capture::parse_shard(fmt::format("{}/2", shard), whole);
    capture::run_capture(whole);
  }
  auto merged = activations::read_activation_file(
      capture::merge_shards(capture::find_shard_dirs(tmp.file("sharded")), tmp.file("merged"), {})[0]);
  for (Split split : activations::kSplits) {
    CHECK(merged.split(split).expert_ids == unsharded.split(split).expert_ids);
    const auto& a = merged.split(split).expert_weights;
    const auto& b = unsharded.split(split).expert_weights;
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
    CHECK(merged.split(split).offsets == unsharded.split(split).offsets);
  }
}

namespace {

// A routed expert a capture chose for an example: its id and weight.
using Chosen = std::vector<std::pair<int64_t, double>>;

// Captures layer `layer` of the fixture `model_name` at the router and experts sites (16 texts, last position) and
// calls `check` for every example with the router logits recomputed from its text (`router` indexes the layers with a
// router), the captured row of logits and the captured (expert, weight) pairs, most probable first.
void check_routing_sites(const std::string& model_name, int64_t layer, int64_t router,
                         const std::function<void(const at::Tensor&, const at::Tensor&, const Chosen&)>& check) {
  TempDir tmp;
  const std::string model_dir = fixture_model(model_name), dataset = write_action_dataset(tmp, 16);
  auto capture_layer = [&](Site site, const std::string& out) {
    capture::CaptureOptions o = cpu_capture_options(dataset, tmp.file(out));
    o.model_dir = model_dir;
    o.site = site;
    o.position = Position::kLast;
    o.layers = std::to_string(layer);
    o.gzip = site == Site::kExperts;
    return activations::read_activation_file(capture::run_capture(o).files[0]);
  };
  auto routers = capture_layer(Site::kRouter, "router");
  auto experts = capture_layer(Site::kExperts, "experts");
  const int64_t width = routers.attributes.hidden_size, top_k = experts.attributes.hidden_size;
  auto m = model::TransformerModel::load(model_dir, {});
  auto tok = tokenizer::Tokenizer::from_file(model_dir);
  data::Dataset d = data::read_dataset(dataset, {});
  for (Split split : activations::kSplits) {
    const auto& rows = routers.split(split);
    const auto& chosen = experts.split(split);
    for (int64_t e = 0; e < rows.examples(); ++e) {
      const std::string& text = d.examples[static_cast<size_t>(rows.example_index[static_cast<size_t>(e)])].text;
      at::Tensor logits =
          readout::read_hidden_states(m, tok.encode(text + activations::kDefaultPromptSuffix)).router_logits[router][-1];
      Chosen pairs;
      for (int64_t j = 0; j < top_k; ++j) {
        const auto at = static_cast<size_t>(e * top_k + j);
        pairs.emplace_back(chosen.expert_ids[at], chosen.expert_weights[at]);
      }
      check(logits, file_row(rows.activations, e, width), pairs);
    }
  }
}

// DeepSeek V3's choice among 8 experts in 4 groups of 2 (the best 2 groups kept, top 2), from a token's router logits
// and the correction bias, as transformers' DeepseekV3TopkRouter makes it: expert -> weight.
std::map<int64_t, double> deepseek_choice(const at::Tensor& logits, const at::Tensor& bias) {
  std::vector<double> scores(8), biased(8), group(4);
  for (int64_t e = 0; e < 8; ++e) {
    scores[e] = 1.0 / (1.0 + std::exp(-logits[e].item<double>()));
    biased[e] = scores[e] + bias[e].item<double>();
    group[e / 2] += biased[e];  // a group's score: its two best, here both
  }
  std::vector<int64_t> groups = {0, 1, 2, 3}, experts = {0, 1, 2, 3, 4, 5, 6, 7};
  std::sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) { return group[a] > group[b]; });
  for (int64_t e = 0; e < 8; ++e) {
    if (e / 2 != groups[0] && e / 2 != groups[1]) biased[e] = 0.0;
  }
  std::sort(experts.begin(), experts.end(), [&](int64_t a, int64_t b) { return biased[a] > biased[b]; });
  const double sum = scores[experts[0]] + scores[experts[1]];
  return {{experts[0], 2.5 * scores[experts[0]] / sum}, {experts[1], 2.5 * scores[experts[1]] / sum}};
}

}  // namespace

// gpt-oss routes by its router's top k logits (bias included), weighted by a softmax over those k alone.
TEST_CASE("router and experts sites of gpt_oss: the logits with their bias, the top k logits softmaxed") {
  check_routing_sites("gpt_oss", 1, 1, [](const at::Tensor& logits, const at::Tensor& row, const Chosen& chosen) {
    REQUIRE(row.size(0) == 4);
    CHECK((row - logits).abs().max().item<double>() < 1e-5);
    auto [top, ids] = at::topk(logits, 2);
    at::Tensor weights = at::softmax(top, -1);
    REQUIRE(chosen.size() == 2);
    for (int64_t j = 0; j < 2; ++j) {
      CHECK(chosen[static_cast<size_t>(j)].first == ids[j].item<int64_t>());
      CHECK(chosen[static_cast<size_t>(j)].second == doctest::Approx(weights[j].item<double>()).epsilon(1e-5));
    }
  });
}

// DeepSeek V3 routes by sigmoid scores within groups, with a correction bias for choosing only.
TEST_CASE("router and experts sites of deepseek_v3: the raw logits, the experts chosen by groups with their bias") {
  const std::string model_dir = fixture_model("deepseek_v3");
  safetensors::File weights(model_dir + "/model.safetensors");
  const at::Tensor bias = read_tensor(weights, weights.at("model.layers.2.mlp.gate.e_score_correction_bias"));
  // Layers with a router: 1, 2, 3.
  check_routing_sites("deepseek_v3", 2, 1, [&](const at::Tensor& logits, const at::Tensor& row, const Chosen& chosen) {
    REQUIRE(row.size(0) == 8);
    CHECK((row - logits).abs().max().item<double>() < 1e-5);
    const std::map<int64_t, double> expected = deepseek_choice(logits, bias);
    REQUIRE(chosen.size() == 2);
    for (const auto& choice : chosen) {
      const auto id = choice.first;
      const auto weight = choice.second;
      REQUIRE_MESSAGE(expected.count(id) == 1, "expert ", id, " was chosen");
      CHECK(weight == doctest::Approx(expected.at(id)).epsilon(1e-5));
    }
  });
}
