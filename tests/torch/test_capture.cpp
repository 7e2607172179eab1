// capture_activations on a fixture model: the file layout, rows equal to single forward passes, positions and
// sites, resumption after kill -9 and after a full disk, out-of-memory retries, compression, and bad input through
// the tool.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "capture/capture.h"
#include "capture/merge.h"
#include "capture/summary.h"
#include "common/json.h"
#include "data/splits.h"
#include "activations/activation_store.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "activation_checks.h"
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
const std::vector<std::string> kLabels = {"analyzing", "reframing", "noticing", "questioning"};

// A small labelled dataset with texts of varied lengths (so batches are padded).
std::string write_dataset(const TempDir& tmp, int count, const std::string& name = "data.jsonl") {
  static const char* words[] = {"the", "plan", "failed", "so", "I", "looked", "again", "at", "every", "step",
                                "and", "wondered", "what", "else", "could", "explain", "it", "today"};
  std::string lines;
  for (int i = 0; i < count; ++i) {
    std::string text = kLabels[static_cast<size_t>(i % 4)];
    for (int w = 0; w < 3 + (i * 7) % 19; ++w) text += std::string(" ") + words[(i * 5 + w * 3) % 18];
    lines += Json({{"text", text}, {"cognitive_action", kLabels[static_cast<size_t>(i % 4)]}, {"domain", fmt::format("d{}", i % 3)}}).dump() + "\n";
  }
  std::string path = tmp.file(name);
  probekit::testing::write_text(path, lines);
  return path;
}

capture::CaptureOptions base_options(const std::string& dataset, const std::string& out) {
  capture::CaptureOptions o;
  o.model_dir = kGemmaModel;
  o.dataset_path = dataset;
  o.output_dir = out;
  o.device = "cpu";
  return o;
}

// Activations of every group of every layer file, for byte-for-byte comparison.
std::vector<std::vector<float>> all_activations(const std::string& dir, const std::vector<int64_t>& layers) {
  std::vector<std::vector<float>> out;
  for (int64_t layer : layers) {
    auto file = activations::read_activation_file(dir + "/" + activations::layer_file_name(layer));
    for (Split split : activations::kSplits) out.push_back(file.split(split).activations);
  }
  return out;
}

}  // namespace

TEST_CASE("capture writes the reference's layout plus our extensions") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 40);
  capture::CaptureOptions o = base_options(dataset, tmp.file("out"));
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
  std::string dataset = write_dataset(tmp, 24);
  capture::CaptureOptions o = base_options(dataset, tmp.file("out"));
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
  std::string dataset = write_dataset(tmp, 16);
  capture::CaptureOptions o = base_options(dataset, tmp.file("out"));
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
  std::string dataset = write_dataset(tmp, 16);
  auto capture_with = [&](Position position, Site site, const std::string& name) {
    capture::CaptureOptions o = base_options(dataset, tmp.file(name));
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
    capture::CaptureOptions o = base_options(dataset, tmp.file("pre"));
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

TEST_CASE("router and experts sites: rows are the routing of single passes, shards merge, dense layers are refused") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 16);
  auto capture_moe = [&](Site site, Position position, const std::string& layers, const std::string& out) {
    capture::CaptureOptions o = base_options(dataset, tmp.file(out));
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

  // Per-token expert choices of a run in two shards, merged, equal the unsharded run's (the weights to fp32
  // rounding: other batches pad differently).
  capture::CaptureOptions whole = base_options(dataset, tmp.file("whole"));
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

namespace {

// A routed expert a capture chose for an example: its id and weight.
using Chosen = std::vector<std::pair<int64_t, double>>;

// Captures layer `layer` of the fixture `model_name` at the router and experts sites (16 texts, last position) and
// calls `check` for every example with the router logits recomputed from its text (`router` indexes the layers with a
// router), the captured row of logits and the captured (expert, weight) pairs, most probable first.
void check_routing_sites(const std::string& model_name, int64_t layer, int64_t router,
                         const std::function<void(const at::Tensor&, const at::Tensor&, const Chosen&)>& check) {
  TempDir tmp;
  const std::string model_dir = fixture_model(model_name), dataset = write_dataset(tmp, 16);
  auto capture_layer = [&](Site site, const std::string& out) {
    capture::CaptureOptions o = base_options(dataset, tmp.file(out));
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

TEST_CASE("an out-of-memory batch is retried in halves and the run completes with the same rows") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 30);
  capture::CaptureOptions o = base_options(dataset, tmp.file("normal"));
  o.layers = "4";
  auto normal = capture::run_capture(o);
  o.output_dir = tmp.file("retried");
  o.simulate_out_of_memory_above = 3;
  auto retried = capture::run_capture(o);
  CHECK(retried.out_of_memory_retries > 0);
  auto a = all_activations(o.output_dir, {4}), b = all_activations(tmp.file("normal"), {4});
  REQUIRE(a.size() == b.size());
  for (size_t g = 0; g < a.size(); ++g) {
    REQUIRE(a[g].size() == b[g].size());
    for (size_t i = 0; i < a[g].size(); ++i) CHECK(a[g][i] == doctest::Approx(b[g][i]).epsilon(1e-5));
  }
}

TEST_CASE("gzip files hold the same data, and long texts are cut from the start") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 20);
  capture::CaptureOptions o = base_options(dataset, tmp.file("plain"));
  o.layers = "5";
  capture::run_capture(o);
  o.output_dir = tmp.file("gzip");
  o.gzip = true;
  capture::run_capture(o);
  CHECK(all_activations(tmp.file("gzip"), {5}) == all_activations(tmp.file("plain"), {5}));

  o.output_dir = tmp.file("short");
  o.gzip = false;
  o.max_length = 12;
  capture::CaptureSummary s = capture::run_capture(o);
  CHECK(s.truncated > 0);
  // The suffix and the last token survive: the last row of a cut text equals a run of BOS + its last tokens.
  auto tok = tokenizer::Tokenizer::from_file(kGemmaModel);
  auto file = activations::read_activation_file(s.files[0]);
  data::Dataset d = data::read_dataset(dataset, {});
  const auto& train = file.split(Split::kTrain);
  std::vector<int32_t> ids = tok.encode(d.examples[static_cast<size_t>(train.example_index[0])].text + activations::kDefaultPromptSuffix);
  if (ids.size() > 12) ids.erase(ids.begin() + 1, ids.end() - 11);
  auto m = model::TransformerModel::load(kGemmaModel, {});
  model::ForwardPass pass;
  pass.input_ids = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  pass.last_layer = 5;
  at::Tensor expected = m.forward(pass)[0][-1];
  at::Tensor actual = at::from_blob(const_cast<float*>(train.activations.data()), {64}, at::kFloat);
  CHECK((actual - expected).abs().max().item<double>() < 1e-4);
}

TEST_CASE("kill -9 at several points, then --resume, gives datasets identical to an uninterrupted run") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 400);
  std::string common = fmt::format("{} --model {} --dataset {} --device cpu --layers 1,5 --window 4 --threads 1 --quiet",
                                   tool("capture_activations"), kGemmaModel, dataset);
  CommandResult reference = run_command(common + " --output-dir " + tmp.file("reference"));
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.output);
  auto expected = all_activations(tmp.file("reference"), {1, 5});
  // Kill once the files exist but nothing is committed (-1), and after 40, 200 and 360 committed examples.
  for (int target : {-1, 40, 200, 360}) {
    std::string out = tmp.file(fmt::format("killed_{}", target + 1));
    std::string partial = out + "/" + activations::layer_file_name(5) + ".partial";
    std::string wait_for = target < 0 ? fmt::format("[ -e {} ]", partial)
                                      : fmt::format("[ \"$(sed -n s/examples_done=//p {}.progress 2>/dev/null)\" -ge {} ] 2>/dev/null",
                                                    partial, target);
    CommandResult killed = run_command(fmt::format(
        "bash -c '{} --output-dir {} & pid=$!; until {}; do kill -0 $pid 2>/dev/null || exit 3; sleep 0.005; done; "
        "kill -9 $pid; wait $pid'",
        common, out, wait_for));
    REQUIRE_MESSAGE(killed.exit_code == 137, "the run was not killed midway (target ", target, "): ", killed.output);
    CommandResult resumed = run_command(common + " --output-dir " + out + " --resume");
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
    CHECK_MESSAGE(all_activations(out, {1, 5}) == expected, "killed at ", target);
    CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(1) + ".partial"));
  }
}

TEST_CASE("disk full while capturing: a clear error, complete files untouched, --resume completes once space is freed") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 300);
  // Per-token rows make each layer file a few megabytes of 1 MB chunks, so a full disk stops the run between
  // commits rather than before the first.
  auto capture = [&](const std::string& out, int layer, const std::string& extra = "") {
    return fmt::format("{} --model {} --dataset {} --device cpu --layers {} --position all --window 4 --threads 1 --quiet "
                       "--output-dir {} {}",
                       tool("capture_activations"), kGemmaModel, dataset, layer, out, extra);
  };
  CommandResult reference = run_command(capture(tmp.file("reference"), 5));
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.output);
  const auto expected = all_activations(tmp.file("reference"), {5});

  // In `out`, a file of layer 1 from an earlier run stays as it was while layer 5's capture fails with `reason`;
  // after `free_space`, --resume finishes layer 5 with the rows of an uninterrupted run.
  auto check = [&](const std::string& out, const std::string& earlier, const CommandResult& failed, const char* reason,
                   const std::function<void()>& free_space) {
    CHECK(failed.exit_code == 1);
    CHECK_CONTAINS(failed.output, out + "/" + activations::layer_file_name(5) + ".partial");
    CHECK_CONTAINS(failed.output, reason);
    CHECK_CONTAINS(failed.output, "The disk is full (or a file size limit was reached): free space and run the command again");
    CHECK(probekit::testing::read_text(out + "/" + activations::layer_file_name(1)) == earlier);
    CHECK_FALSE(path_exists(out + "/" + activations::layer_file_name(5)));
    free_space();
    CommandResult resumed = run_command(capture(out, 5, "--resume"));
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
    CHECK(all_activations(out, {5}) == expected);
    CHECK(probekit::testing::read_text(out + "/" + activations::layer_file_name(1)) == earlier);
  };

  // A file size limit (ulimit -f, in KiB) works without privileges; it stops the run as it creates its file,
  // whose layout reserves the whole size up front.
  std::string limited = tmp.file("size_limit");
  REQUIRE(run_command(capture(limited, 1)).exit_code == 0);
  std::string earlier = probekit::testing::read_text(limited + "/" + activations::layer_file_name(1));
  CommandResult failed = run_command(fmt::format("bash -c 'ulimit -f 1024 && exec {}'", capture(limited, 5)));
  check(limited, earlier, failed, "File too large", [] {});

  // A small tmpfs stops the run when it runs out of space in the middle, after some commits.
  std::string disk = tmp.file("disk");
  make_directories(disk);
  CommandResult mounted = run_command(fmt::format("mount -t tmpfs -o size=16m tmpfs {}", disk));
  if (mounted.exit_code != 0) {
    MESSAGE("a disk filling up mid-run is not tested here: mounting a tmpfs needs root and CAP_SYS_ADMIN (",
            mounted.output, ")");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { run_command("umount " + path); }
  } unmount{disk};
  std::string out = disk + "/out";
  REQUIRE(run_command(capture(out, 1)).exit_code == 0);
  earlier = probekit::testing::read_text(out + "/" + activations::layer_file_name(1));
  struct statvfs space {};
  REQUIRE(statvfs(disk.c_str(), &space) == 0);
  // Room for half of a layer file: the run fails once its first chunks are written.
  uint64_t free_bytes = static_cast<uint64_t>(space.f_bavail) * space.f_frsize;
  REQUIRE(free_bytes > earlier.size() / 2);
  probekit::testing::write_text(disk + "/filler", std::string(free_bytes - earlier.size() / 2, 'x'));
  failed = run_command(capture(out, 5));
  CHECK_MESSAGE(activations::has_progress_record(out + "/" + activations::layer_file_name(5)),
                "the run failed before its first commit: ", failed.output);
  check(out, earlier, failed, "No space left on device", [&] { remove_tree(disk + "/filler"); });
}

TEST_CASE("existing outputs are never overwritten or ignored silently") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 16);
  std::string common = fmt::format("{} --model {} --dataset {} --device cpu --layers 2 --output-dir {} --quiet",
                                   tool("capture_activations"), kGemmaModel, dataset, tmp.file("out"));
  REQUIRE(run_command(common).exit_code == 0);
  CommandResult again = run_command(common);
  CHECK(again.exit_code == 1);
  CHECK_CONTAINS(again.output, "already exists; pass --overwrite");
  CommandResult resumed = run_command(common + " --resume");
  CHECK(resumed.exit_code == 0);
  CHECK_CONTAINS(resumed.output, "already complete");
  CHECK(run_command(common + " --overwrite").exit_code == 0);
}

TEST_CASE("bad input to capture_activations: clear message, exit code 1 (2 for bad flags)") {
  TempDir tmp;
  std::string good = write_dataset(tmp, 16);
  auto run_with = [&](const std::string& model, const std::string& dataset, const std::string& extra = "") {
    return run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {} {}", tool("capture_activations"),
                                   model, dataset, tmp.file("out"), extra));
  };
  std::string bad = tmp.file("bad.jsonl");
  probekit::testing::write_text(bad, probekit::testing::read_text(good) + "{\"text\": oops}\n");
  CommandResult r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:17: invalid JSON");

  probekit::testing::write_text(bad, "{\"text\": \"x\", \"cognitive_action\": \"a\"}\n{\"cognitive_action\": \"a\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: missing field 'text'");

  probekit::testing::write_text(bad, "{\"text\": \"x\", \"topic\": \"a\"}\n");
  CHECK_CONTAINS(run_with(kGemmaModel, bad).output, "unknown label field");
  probekit::testing::write_text(bad, "\n\n");
  CHECK_CONTAINS(run_with(kGemmaModel, bad).output, "no usable examples");
  // Refused before the output directory is made (a regression: the directory and its lock file were left behind).
  const CommandResult missing = run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {}",
                                                        tool("capture_activations"), kGemmaModel,
                                                        tmp.file("missing.jsonl"), tmp.file("never_made")));
  CHECK_CONTAINS(missing.output, "cannot open the dataset");
  CHECK(!path_exists(tmp.file("never_made")));
  CHECK_CONTAINS(run_with(tmp.path(), good).output, "no config.json");

  std::string no_weights = tmp.file("no_weights");
  probekit::testing::copy_dir(kGemmaModel, no_weights);
  remove_tree(no_weights + "/model.safetensors");
  CHECK_CONTAINS(run_with(no_weights, good).output, "no model.safetensors");

  r = run_with(kGemmaModel, good, "--layers 9");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "layer 9 is out of range: the model has 6 layers");
  CHECK(run_with(kGemmaModel, good, "--position middle").exit_code == 2);
  CHECK(run_with(kGemmaModel, good, "--split 0.5,0.5").exit_code == 2);

  probekit::testing::write_text(bad, probekit::testing::read_text(good) + "not json\n");
  r = run_with(kGemmaModel, bad, "--skip-invalid");
  CHECK(r.exit_code == 0);
  CHECK_CONTAINS(r.output, "1 invalid lines were skipped");

  std::string first_line = probekit::testing::read_text(good).substr(0, probekit::testing::read_text(good).find('\n') + 1);
  probekit::testing::write_text(bad, first_line + "{\"text\": \" \", \"cognitive_action\": \"noticing\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: field 'text' is empty");
  probekit::testing::write_text(bad, first_line + "{\"text\": \"caf\xe9\", \"cognitive_action\": \"noticing\"}\n");
  r = run_with(kGemmaModel, bad);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "bad.jsonl:2: the line is not valid UTF-8 text");

  auto run_on = [&](const std::string& device) {
    return run_command(fmt::format("{} --model {} --dataset {} --output-dir {} {}", tool("capture_activations"), kGemmaModel,
                                   good, tmp.file("out"), device));
  };
  r = run_on("--device tpu");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--device tpu: unknown device; expected auto, cpu, cuda, cuda:N, rocm or mps");
  // MPS exists only on Apple machines; there bf16 becomes fp32 with a warning (tests/core/test_device_select.cpp).
  r = run_on("--device mps --dtype bf16");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "--device mps: Apple MPS is not available here");
}

TEST_CASE("bad checkpoints through capture_activations: exit code 1, the file and the problem named") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 16);
  auto run_with = [&](const std::string& model) {
    return run_command(fmt::format("{} --model {} --dataset {} --device cpu --output-dir {}", tool("capture_activations"),
                                   model, dataset, tmp.file("out")));
  };
  auto damaged_copy = [&](const std::string& fixture, const std::string& name) {
    std::string dir = tmp.file(name);
    probekit::testing::copy_dir(fixture_model(fixture), dir);
    return dir;
  };

  std::string truncated = damaged_copy("gemma3_text", "truncated");
  std::string weights = truncated + "/model.safetensors";
  REQUIRE(::truncate(weights.c_str(), static_cast<off_t>(file_size(weights) / 2)) == 0);
  CommandResult r = run_with(truncated);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "truncated/model.safetensors: tensor");
  CHECK_CONTAINS(r.output, "(file truncated?)");

  std::string corrupt = damaged_copy("gemma3_text", "corrupt");
  probekit::testing::write_text(corrupt + "/model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  r = run_with(corrupt);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "corrupt/model.safetensors: header length 9223372036854775807 exceeds");

  std::string sharded = damaged_copy("qwen3_sharded", "sharded");
  remove_tree(sharded + "/model-00002-of-00003.safetensors");
  r = run_with(sharded);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "model-00002-of-00003.safetensors listed in the index is missing");

  std::string inconsistent = damaged_copy("gemma3_text", "inconsistent");
  Json config = read_json_file(inconsistent + "/config.json");
  config["num_key_value_heads"] = 3;
  write_json_file(inconsistent + "/config.json", config);
  r = run_with(inconsistent);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "inconsistent/config.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)");

  config["num_key_value_heads"] = 1;
  config["model_type"] = "mamba";
  write_json_file(inconsistent + "/config.json", config);
  r = run_with(inconsistent);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "inconsistent/config.json: unsupported model_type 'mamba' (supported: llama,");

  std::string tokenizer = damaged_copy("gemma3_text", "tokenizer");
  Json tokenizer_json = read_json_file(tokenizer + "/tokenizer.json");
  tokenizer_json["normalizer"] = {{"type", "Lowercased"}};
  write_json_file(tokenizer + "/tokenizer.json", tokenizer_json);
  r = run_with(tokenizer);
  CHECK(r.exit_code == 1);
  CHECK_CONTAINS(r.output, "tokenizer/tokenizer.json: normalizer: unknown type \"Lowercased\" (supported: NFC,");
}

TEST_CASE("texts longer than a learned-position model's positions: an error naming --max-length, or cut with a warning") {
  // GPT-2 has 512 learned positions; rotary models have no such limit and run long texts whole.
  TempDir tmp;
  std::string lines;
  for (int i = 0; i < 16; ++i) {
    std::string text = i == 3 ? "" : kLabels[static_cast<size_t>(i % 4)] + " looked again";
    for (int w = 0; i == 3 && w < 700; ++w) text += "again and ";
    lines += Json({{"text", text}, {"cognitive_action", kLabels[static_cast<size_t>(i % 4)]}}).dump() + "\n";
  }
  probekit::testing::write_text(tmp.file("long.jsonl"), lines);
  auto run_with = [&](const std::string& extra) {
    return run_command(fmt::format("{} --model {}/models/gpt2 --dataset {} --device cpu --layers 1 --output-dir {} {}",
                                   tool("capture_activations"), PROBEKIT_FIXTURES, tmp.file("long.jsonl"), tmp.file("out"), extra));
  };
  CommandResult r = run_with("");
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "long.jsonl:4: this text's prompt is");
  CHECK_CONTAINS(r.output, "more than the model's 512 positions (learned position embeddings, none past them): cut long "
                           "texts with --max-length 512");
  r = run_with("--max-length 512");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "1 of 16 texts were longer than --max-length 512 tokens and were cut from the start");
  CHECK_CONTAINS(r.output, "1 texts were cut to --max-length 512");
}

TEST_CASE("several model replicas share the batches and write the same files as one") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 40);
  capture::CaptureOptions o = base_options(dataset, tmp.file("one"));
  o.layers = "2,5";
  o.window = 16;
  o.batch_size = 3;
  capture::run_capture(o);
  o.output_dir = tmp.file("two");
  o.devices = {"cpu", "cpu"};
  capture::CaptureSummary two = capture::run_capture(o);
  CHECK(two.device == "cpu,cpu");
  // Replicas cut the run's last batches finer (capture::with_finer_tail): those rows are batched differently.
  for (int64_t layer : {2, 5}) {
    check_same_rows(activations::read_activation_file(tmp.file("two/" + activations::layer_file_name(layer))),
                    activations::read_activation_file(tmp.file("one/" + activations::layer_file_name(layer))));
  }
  CHECK(two.processed == 40);
}

TEST_CASE("shards of a run, merged, equal the whole run") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 30);
  capture::CaptureOptions o = base_options(dataset, tmp.file("whole"));
  o.layers = "3";
  o.position = Position::kAll;
  o.dataset.keep_fields = {"domain"};
  capture_whole_and_shards(o, tmp, 3);
  std::string merge = tool("merge_activations") + " --output-dir " + tmp.file("sharded");
  CommandResult partial = run_command(merge + " " + tmp.file("sharded/shard_0_of_3") + " " + tmp.file("sharded/shard_2_of_3"));
  CHECK(partial.exit_code == 1);
  CHECK_CONTAINS(partial.output, "every shard 0..N-1 is needed once");
  CommandResult merged = run_command(merge);
  REQUIRE_MESSAGE(merged.exit_code == 0, merged.output);
  auto whole = activations::read_activation_file(tmp.file("whole/" + activations::layer_file_name(3)));
  auto joined = activations::read_activation_file(tmp.file("sharded/" + activations::layer_file_name(3)));
  CHECK(joined.attributes.identity() == whole.attributes.identity());
  testing::check_same_rows(joined, whole);
}

TEST_CASE("the summary counts the batches and the padding they computed") {
  TempDir tmp;
  std::string dataset = write_dataset(tmp, 24);
  capture::CaptureOptions o = base_options(dataset, tmp.file("one"));
  o.batch_size = 1;  // no batch, no padding
  capture::CaptureSummary single = capture::run_capture(o);
  CHECK(single.tokens > 0);
  CHECK(single.computed_tokens == single.tokens);
  CHECK(single.batches == 24);
  o.output_dir = tmp.file("all");
  o.batch_size = 24;  // one batch, every text padded to the longest
  capture::CaptureSummary batched = capture::run_capture(o);
  CHECK(batched.tokens == single.tokens);
  CHECK(batched.computed_tokens > batched.tokens);
  CHECK(batched.batches == 1);
  Json summary = capture::summary_json(batched);
  CHECK(summary["batches"].get<int64_t>() == 1);
  CHECK(summary["padding_fraction"].get<double>() ==
        doctest::Approx(1.0 - static_cast<double>(batched.tokens) / batched.computed_tokens));
}

TEST_CASE("--shard I/N takes whole numbers an int holds; anything else is refused, never cut") {
  capture::CaptureOptions options;
  capture::parse_shard("3/8", options);
  CHECK(options.shard_index == 3);
  CHECK(options.shard_count == 8);
  capture::parse_shard("2147483646/2147483647", options);
  CHECK(options.shard_count == 2147483647);
  // 4294967298 would be 2 cut to 32 bits: shard 1 of 2 while the log said 1 of 4294967298.
  for (const char* bad : {"1/4294967298", "4294967297/4", "1/-2", "-1/2", "1/2x", "1 /2", "1/", "/2", "12", "1.0/2", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(capture::parse_shard(bad, options),
                         doctest::Contains("expected I/N, e.g. 0/4 (whole numbers up to 2147483647)"), UsageError);
  }
}
