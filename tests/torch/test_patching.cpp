// Activation patching against transformers (tests/fixtures/models/*/patching.json, made by the shared fixtures'
// tools/gen_patching_refs.py: forward hooks on each decoder layer, fp32, CPU), and the engine's own properties: batched cells
// equal cells run alone, the noise direction, ROME's noise corruption, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "loading/model_loading.h"
#include "patching/patch_tool.h"
#include "patching/patching.h"
#include "patching/report.h"
#include "sites/layers.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;
using namespace probekit::patching;
using probekit::testing::fixture_model;

namespace {

loading::SharedModel load_cpu(const std::string& name) {
  loading::ModelRequest request;
  request.model_dir = fixture_model(name);
  request.device = "cpu";
  request.dtype = "fp32";
  return loading::load_shared_model(request);
}

double largest_abs(const Json& rows) {
  double largest = 0;
  for (const Json& row : rows) {
    for (const Json& v : row) largest = std::max(largest, std::fabs(v.get<double>()));
  }
  return largest;
}

// The largest |ours - reference| over a [layer][position] grid.
double largest_difference(const at::Tensor& ours, const Json& reference) {
  REQUIRE(ours.size(0) == static_cast<int64_t>(reference.size()));
  double largest = 0;
  for (int64_t l = 0; l < ours.size(0); ++l) {
    REQUIRE(ours.size(1) == static_cast<int64_t>(reference[static_cast<size_t>(l)].size()));
    for (int64_t p = 0; p < ours.size(1); ++p) {
      largest = std::max(largest, std::fabs(ours[l][p].item<double>() - reference[static_cast<size_t>(l)][static_cast<size_t>(p)].get<double>()));
    }
  }
  return largest;
}

PatchRequest both_methods() {
  PatchRequest request;
  request.attribution = true;
  return request;
}

}  // namespace

TEST_CASE("patching grids and attributions match transformers' forward hooks on seven families") {
  for (const char* name : {"llama", "qwen3", "gemma3_text", "gpt2", "qwen3_moe", "gpt_oss", "olmo3"}) {
    CAPTURE(name);
    const Json reference = read_json_file(fixture_model(name) + "/patching.json");
    const loading::SharedModel model = load_cpu(name);
    const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
    CHECK(pair.clean == reference["clean_ids"].get<std::vector<int32_t>>());
    CHECK(pair.corrupted == reference["corrupted_ids"].get<std::vector<int32_t>>());
    const PatchingResult result = run_patching(*model.model, *model.tokenizer, pair, both_methods());
    CHECK(result.metric.answer.id == reference["answer"].get<int32_t>());
    CHECK(result.metric.foil.id == reference["foil"].get<int32_t>());
    const double scale = std::max(std::fabs(reference["clean_metric"].get<double>()),
                                  std::fabs(reference["corrupted_metric"].get<double>()));
    CHECK(std::fabs(result.clean_metric - reference["clean_metric"].get<double>()) <= 1e-4 * scale);
    CHECK(std::fabs(result.corrupted_metric - reference["corrupted_metric"].get<double>()) <= 1e-4 * scale);
    CHECK(largest_difference(result.sites[0].grid, reference["grid"]) <= 1e-4 * scale);
    CHECK(largest_difference(result.sites[0].attribution, reference["attribution"]) <=
          1e-4 * largest_abs(reference["attribution"]));
  }
}

TEST_CASE("cells run in batches give the bits of each cell run alone") {
  const loading::SharedModel model = load_cpu("qwen3");
  const Json reference = read_json_file(fixture_model("qwen3") + "/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  PatchRequest request;
  request.sites = {Site::kResidPost, Site::kAttnOut, Site::kMlpOut};
  request.layer_window = 3;
  request.rows_per_batch = 64;
  const PatchingResult batched = run_patching(*model.model, *model.tokenizer, pair, request);
  request.rows_per_batch = 1;
  const PatchingResult alone = run_patching(*model.model, *model.tokenizer, pair, request);
  for (size_t s = 0; s < request.sites.size(); ++s) {
    CAPTURE(site_name(request.sites[s]));
    CHECK(at::equal(batched.sites[s].grid, alone.sites[s].grid));
  }
}

TEST_CASE("a patch of the last layer at the last token gives the source run's metric, in either direction") {
  const loading::SharedModel model = load_cpu("llama");
  const Json reference = read_json_file(fixture_model("llama") + "/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  PatchRequest request;
  const int64_t last_layer = model.model->loaded_layers() - 1, last = static_cast<int64_t>(pair.clean.size()) - 1;
  request.layers = {last_layer};
  request.positions = {last};
  const PatchingResult denoise = run_patching(*model.model, *model.tokenizer, pair, request);
  CHECK(denoise.sites[0].grid[0][0].item<double>() == doctest::Approx(denoise.clean_metric).epsilon(1e-6));
  request.direction = Direction::kNoise;
  const PatchingResult noise = run_patching(*model.model, *model.tokenizer, pair, request);
  CHECK(noise.sites[0].grid[0][0].item<double>() == doctest::Approx(noise.corrupted_metric).epsilon(1e-6));
  CHECK(noise.metric.answer.id == denoise.metric.answer.id);
}

TEST_CASE("the noise direction is denoising with the prompts' roles swapped") {
  const loading::SharedModel model = load_cpu("gemma3_text");
  const Json reference = read_json_file(fixture_model("gemma3_text") + "/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  PatchRequest request;
  request.sites = {Site::kResidPost, Site::kMlpOut};
  request.direction = Direction::kNoise;
  request.attribution = true;
  const PatchingResult noise = run_patching(*model.model, *model.tokenizer, pair, request);
  const PromptPair swapped{pair.corrupted, pair.clean, {}, {}, 0};
  request.direction = Direction::kDenoise;
  request.metric = {MetricKind::kLogitDiff, {std::to_string(noise.metric.answer.id), std::to_string(noise.metric.foil.id)}};
  const PatchingResult denoise = run_patching(*model.model, *model.tokenizer, swapped, request);
  for (size_t s = 0; s < request.sites.size(); ++s) {
    CHECK(at::equal(noise.sites[s].grid, denoise.sites[s].grid));
    CHECK(at::allclose(noise.sites[s].attribution, denoise.sites[s].attribution, 1e-6, 1e-6));
  }
}

TEST_CASE("attribution alone resolves the metric's tokens itself and gives the attribution of both methods") {
  const loading::SharedModel model = load_cpu("llama");
  const Json reference = read_json_file(fixture_model("llama") + "/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  for (const char* metric : {"logit-diff", "prob", "kl", "logit-diff:668,175"}) {
    for (Direction direction : {Direction::kDenoise, Direction::kNoise}) {
      if (direction == Direction::kNoise && std::string(metric) == "kl") continue;  // refused: its gradient is zero
      CAPTURE(metric);
      PatchRequest request = both_methods();
      request.metric = parse_metric(metric);
      request.direction = direction;
      const PatchingResult both = run_patching(*model.model, *model.tokenizer, pair, request);
      request.exact = false;
      const PatchingResult alone = run_patching(*model.model, *model.tokenizer, pair, request);
      CHECK(alone.metric.answer.id == both.metric.answer.id);
      CHECK(alone.metric.foil.id == both.metric.foil.id);
      CHECK(alone.clean_metric == doctest::Approx(both.clean_metric).epsilon(1e-5));
      CHECK(alone.corrupted_metric == doctest::Approx(both.corrupted_metric).epsilon(1e-5));
      const double largest = both.sites[0].attribution.abs().max().item<double>();
      CHECK(largest > 0);
      CHECK((alone.sites[0].attribution - both.sites[0].attribution).abs().max().item<double>() <= 1e-6 * largest);
      CHECK(!alone.sites[0].grid.defined());
    }
  }
}

TEST_CASE("attribution alone measures no effect where the runs agree, on a routed model too") {
  const loading::SharedModel model = load_cpu("mixtral");
  const std::string clean = "The quick brown fox jumps over the lazy dog because it";
  PatchRequest request = both_methods();
  request.exact = false;
  // The same prompt twice: attribution's two batch rows round apart on the CPU (regression: 0.128618 against
  // 0.12862, and `restored` up to 1.14 where nothing was patched).
  const PromptPair same = prompt_pair(*model.model, *model.tokenizer, clean, clean);
  const PatchingResult nothing = run_patching(*model.model, *model.tokenizer, same, request);
  CHECK(nothing.metrics_agree());
  CHECK(nothing.sites[0].attribution.abs().max().item<double>() == 0);
  const Json report = patching_json(nothing, same, request, {"mixtral", "cpu", "fp32", clean, clean, {}}, *model.tokenizer);
  for (const Json& row : Json::parse(report.dump())["restored"]) {
    for (const Json& cell : row) CHECK(cell.is_null());
  }
  // Prompts that differ at the last token: every position before it holds no effect (regression: up to 3e-6).
  const PromptPair pair =
      prompt_pair(*model.model, *model.tokenizer, clean, "The quick brown fox jumps over the lazy dog because he");
  const PatchingResult last = run_patching(*model.model, *model.tokenizer, pair, request);
  const int64_t tokens = static_cast<int64_t>(pair.clean.size());
  CHECK_FALSE(last.metrics_agree());
  CHECK(last.sites[0].attribution.narrow(1, 0, tokens - 1).abs().max().item<double>() == 0);
  CHECK(last.sites[0].attribution.select(1, tokens - 1).abs().max().item<double>() > 0);
}

// tests/fixtures/tools/gen_branch_patching.py: transformers with a forward hook on the attention and MLP modules (or
// the post-norms after them), for the sites patching.json lacks, a layer window and the prob metric.
TEST_CASE("attn_out and mlp_out grids, a layer window and the prob metric match transformers' module hooks") {
  for (const char* name : {"llama", "gemma3_text", "gpt2", "qwen3_moe", "olmo3", "gpt_oss"}) {
    CAPTURE(name);
    const Json patching = read_json_file(fixture_model(name) + "/patching.json");
    const Json reference = read_json_file(fixture_model(name) + "/branch_patching.json");
    const loading::SharedModel model = load_cpu(name);
    const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, patching["clean"], patching["corrupted"]);
    const double scale = std::max(std::fabs(patching["clean_metric"].get<double>()),
                                  std::fabs(patching["corrupted_metric"].get<double>()));
    PatchRequest request = both_methods();
    request.sites = {Site::kAttnOut, Site::kMlpOut};
    const PatchingResult branches = run_patching(*model.model, *model.tokenizer, pair, request);
    for (const SiteGrids& grids : branches.sites) {
      const std::string site = site_name(grids.site);
      CAPTURE(site);
      CHECK(largest_difference(grids.grid, reference["grids"][site]) <= 1e-4 * scale);
      CHECK(largest_difference(grids.attribution, reference["attribution"][site]) <=
            1e-4 * largest_abs(reference["attribution"][site]));
    }
    request = PatchRequest{};
    request.layer_window = 3;
    CHECK(largest_difference(run_patching(*model.model, *model.tokenizer, pair, request).sites[0].grid,
                             reference["window3"]) <= 1e-4 * scale);
    request = PatchRequest{};
    request.metric = parse_metric("prob:" + std::to_string(patching["answer"].get<int32_t>()));
    const PatchingResult prob = run_patching(*model.model, *model.tokenizer, pair, request);
    CHECK(largest_difference(prob.sites[0].grid, reference["prob_grid"]) <= 1e-5);
  }
}

TEST_CASE("ROME's noise corruption: the subject's tokens only, its size, and the same numbers from the same seed") {
  const loading::SharedModel model = load_cpu("llama");
  const std::string clean = "The Eiffel Tower is in the city of";
  const NoiseCorruption noise{"Eiffel Tower", 3.0, 7};
  const PromptPair pair = noised_pair(*model.model, *model.tokenizer, clean, noise);
  CHECK(pair.clean == pair.corrupted);
  REQUIRE(!pair.noised_positions.empty());
  // The tokens noised spell the subject, and no other token is.
  std::string spelled;
  for (int64_t p : pair.noised_positions) spelled += model.tokenizer->decode({pair.clean[static_cast<size_t>(p)]});
  CHECK_CONTAINS(spelled, "Eiffel Tower");
  const at::Tensor noised_rows = pair.noise.abs().sum(-1) > 0;
  for (int64_t p = 0; p < noised_rows.size(0); ++p) {
    const bool listed = std::find(pair.noised_positions.begin(), pair.noised_positions.end(), p) != pair.noised_positions.end();
    CHECK(noised_rows[p].item<bool>() == listed);
  }
  CHECK(pair.noise_std == doctest::Approx(3.0 * model.model->embedding_std()));
  const at::Tensor drawn = pair.noise.index_select(0, at::tensor(pair.noised_positions));
  CHECK(drawn.std().item<double>() == doctest::Approx(pair.noise_std).epsilon(0.2));

  CHECK(at::equal(noised_pair(*model.model, *model.tokenizer, clean, noise).noise, pair.noise));
  CHECK(!at::equal(noised_pair(*model.model, *model.tokenizer, clean, {"Eiffel Tower", 3.0, 8}).noise, pair.noise));
  PatchRequest request;
  request.positions = {0, 2, 5};
  const PatchingResult first = run_patching(*model.model, *model.tokenizer, pair, request);
  const PatchingResult again = run_patching(*model.model, *model.tokenizer, noised_pair(*model.model, *model.tokenizer, clean, noise), request);
  CHECK(at::equal(first.sites[0].grid, again.sites[0].grid));
  CHECK(first.corrupted_metric != first.clean_metric);
  // Regression: noise a double holds but float32 does not gave "the model's logits hold NaN or Inf".
  CHECK_THROWS_WITH_AS(run_patching(*model.model, *model.tokenizer,
                                    noised_pair(*model.model, *model.tokenizer, clean, {"Eiffel Tower", 1e39, 7}), request),
                       doctest::Contains("--noise: the noised run's logits hold NaN or Inf"), UsageError);
}

TEST_CASE("prompts of different token counts are refused with both counts and the tokens where they differ") {
  const loading::SharedModel model = load_cpu("llama");
  std::string message;
  try {
    prompt_pair(*model.model, *model.tokenizer, "When Mary and John went to the store", "When Mary and Christopher went to the store");
  } catch (const UsageError& e) {
    message = e.what();
  }
  const std::vector<int32_t> clean = model.tokenizer->encode("When Mary and John went to the store");
  const std::vector<int32_t> corrupted = model.tokenizer->encode("When Mary and Christopher went to the store");
  REQUIRE(clean.size() != corrupted.size());
  CHECK_CONTAINS(message, fmt::format("the clean one has {}, the corrupted one {}", clean.size(), corrupted.size()));
  size_t differ = 0;
  while (clean[differ] == corrupted[differ]) ++differ;
  CHECK_CONTAINS(message, fmt::format("they differ from token {}: clean '{}'", differ, model.tokenizer->id_to_token(clean[differ])));
  CHECK_CONTAINS(message, fmt::format("corrupted '{}'", model.tokenizer->id_to_token(corrupted[differ])));
}

TEST_CASE("the metric flag names its tokens as ids or strings, and refuses what is not one") {
  CHECK(parse_metric("logit-diff").tokens.empty());
  const std::vector<std::string> answer_and_foil = {"12", "40"};
  CHECK(parse_metric("logit-diff:12,40").tokens == answer_and_foil);
  CHECK(parse_metric("prob: Paris").tokens == std::vector<std::string>{" Paris"});
  CHECK(parse_metric("kl").kind == MetricKind::kKl);
  CHECK_THROWS_AS(parse_metric("logit-diff:12"), UsageError);
  CHECK_THROWS_AS(parse_metric("kl:5"), UsageError);
  CHECK_THROWS_AS(parse_metric("accuracy"), UsageError);
  const loading::SharedModel model = load_cpu("llama");
  const at::Tensor logits = at::zeros({model.model->config().vocab_size});
  const Metric by_id = resolve_metric(parse_metric("prob:300"), logits, logits, *model.tokenizer);
  CHECK(by_id.answer.id == 300);
  CHECK(by_id.answer.text == "The");
  // A vocabulary token, and a text that encodes to one token (digits are read as an id).
  CHECK(resolve_metric(parse_metric("prob:The"), logits, logits, *model.tokenizer).answer.id == 300);
  const Metric named = resolve_metric(parse_metric("logit-diff:The,301"), logits, logits, *model.tokenizer);
  CHECK(named.answer.id == 300);
  CHECK(named.foil.id == 301);
  CHECK_THROWS_AS(resolve_metric(parse_metric("prob:99999"), logits, logits, *model.tokenizer), UsageError);
  // The defaults: the clean run's top token, and the corrupted run's as the foil (the clean run's second when the two
  // agree), resolved on the device.
  at::Tensor clean = logits.clone(), corrupted = logits.clone();
  clean[7] = 3.0;
  clean[9] = 2.0;
  corrupted[11] = 5.0;
  const Metric apart = resolve_metric(parse_metric("logit-diff"), clean, corrupted, *model.tokenizer);
  CHECK((apart.answer.id == 7 && apart.foil.id == 11));
  corrupted[7] = 9.0;
  const Metric agreeing = resolve_metric(parse_metric("logit-diff"), clean, corrupted, *model.tokenizer);
  CHECK((agreeing.answer.id == 7 && agreeing.foil.id == 9));
  CHECK(agreeing(clean.unsqueeze(0))[0].item<double>() == doctest::Approx(1.0));
  // The KL of a run from itself is 0; its gradient flows.
  const Metric kl = resolve_metric(parse_metric("kl"), logits + 1, logits, *model.tokenizer);
  CHECK(kl(logits.unsqueeze(0) + 3)[0].item<double>() == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("patch_activations writes patching.json and a heatmap page per site, and refuses bad input") {
  using probekit::testing::run_command;
  using probekit::testing::tool;
  probekit::testing::TempDir tmp;
  const Json reference = read_json_file(fixture_model("gemma3_text") + "/patching.json");
  const std::string base = fmt::format("{} --model {} --device cpu --dtype fp32 --clean '{}' ", tool("patch_activations"),
                                       fixture_model("gemma3_text"), reference["clean"].get<std::string>());
  const auto ran = run_command(base + fmt::format("--corrupted '{}' --site resid_post,attn_out --method both "
                                                  "--layers 0-2 --positions 1,3-4 --output-dir {}",
                                                  reference["corrupted"].get<std::string>(), tmp.file("out")));
  REQUIRE_MESSAGE(ran.exit_code == 0, ran.output);
  CHECK_CONTAINS(ran.output, "wrote ");
  const Json out = read_json_file(tmp.file("out/patching.json"));
  CHECK(out["answer"]["id"] == reference["answer"]);
  CHECK(out["foil"]["id"] == reference["foil"]);
  CHECK(out["answer"]["token"].is_string());
  CHECK(out["tokens"].size() == reference["clean_ids"].size());
  CHECK(out["patched"]["layers"] == Json({0, 1, 2}));
  CHECK(out["patched"]["positions"] == Json({1, 3, 4}));
  for (const char* key : {"grid", "attribution", "restored"}) {
    CAPTURE(key);
    REQUIRE(out[key].contains("attn_out"));
    CHECK(out[key]["resid_post"].size() == 3);
    CHECK(out[key]["resid_post"][0].size() == 3);
  }
  // The grid's cells are the reference's at those layers and positions.
  CHECK(out["grid"]["resid_post"][1][2].get<double>() ==
        doctest::Approx(reference["grid"][1][3].get<double>()).epsilon(1e-4));
  const double restored = (out["grid"]["attn_out"][2][0].get<double>() - out["corrupted_metric"].get<double>()) /
                          (out["clean_metric"].get<double>() - out["corrupted_metric"].get<double>());
  CHECK(out["restored"]["attn_out"][2][0].get<double>() == doctest::Approx(restored));
  const std::string html = probekit::testing::read_text(tmp.file("out/patching.html"));
  size_t cells = 0;
  for (size_t at = html.find("class=\"cell\""); at != std::string::npos; at = html.find("class=\"cell\"", at + 1)) ++cells;
  CHECK(cells == 2 * 2 * 9);  // two sites, two methods, 3 layers x 3 positions
  // Self-contained: nothing to load or run (the browser test watches what it fetches).
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=") == std::string::npos);
  // Regression: attribution alone reported "0 cells"; a space after a comma of --site was refused as part of a name.
  const auto attributed = run_command(base + fmt::format("--corrupted '{}' --site 'resid_post, attn_out' --method "
                                                         "attribution --layers 0-2 --positions 1,3-4 --output-dir {}",
                                                         reference["corrupted"].get<std::string>(), tmp.file("attributed")));
  REQUIRE_MESSAGE(attributed.exit_code == 0, attributed.output);
  CHECK_CONTAINS(attributed.output, "18/18 cells");

  probekit::testing::check_failure(run_command(base + "--corrupted 'The quick brown' --output-dir " + tmp.file("x")), 2,
                                   {"must have the same number of tokens", "they differ from token"});
  probekit::testing::check_failure(
      run_command(base + "--corrupted 'x' --metric accuracy --output-dir " + tmp.file("x")), 2, {"--metric accuracy"});
  probekit::testing::check_failure(run_command(base + "--corruption noise --subject 'giraffe' --output-dir " + tmp.file("x")),
                                   2, {"--subject \"giraffe\" does not occur"});
  probekit::testing::check_failure(
      run_command(base + fmt::format("--corrupted '{}' --output-dir {}", reference["corrupted"].get<std::string>(),
                                     tmp.file("out"))),
      1, {"--overwrite"});
  // An --output-dir that holds the model: --overwrite would have deleted the checkpoint once the grid was written.
  copy_tree(fixture_model("gemma3_text"), tmp.file("model_copy"));
  probekit::testing::check_failure(
      run_command(fmt::format("{} --model {} --device cpu --clean '{}' --corrupted '{}' --output-dir {} --overwrite",
                              tool("patch_activations"), tmp.file("model_copy"), reference["clean"].get<std::string>(),
                              reference["corrupted"].get<std::string>(), tmp.file("model_copy"))),
      2, {"it holds the input", "which --overwrite would delete"});
  CHECK(is_regular_file(tmp.file("model_copy/model.safetensors")));
}

TEST_CASE("requests patching cannot honour are refused naming the flag") {
  const loading::SharedModel model = load_cpu("llama");
  const Json reference = read_json_file(fixture_model("llama") + "/patching.json");
  const PromptPair pair = prompt_pair(*model.model, *model.tokenizer, reference["clean"], reference["corrupted"]);
  auto refusal = [&](const PatchRequest& request) {
    try {
      run_patching(*model.model, *model.tokenizer, pair, request);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("ran");
  };
  PatchRequest window = both_methods();
  window.layer_window = 3;
  CHECK_CONTAINS(refusal(window), "--layer-window 3 with --method both");
  window.exact = false;
  CHECK_CONTAINS(refusal(window), "--layer-window 3 with --method attribution");
  PatchRequest kl = both_methods();
  kl.direction = Direction::kNoise;
  kl.metric = parse_metric("kl");
  CHECK_CONTAINS(refusal(kl), "--metric kl with --direction noise and --method attribution");
  PatchRequest twice;
  twice.sites = {Site::kMlpOut, Site::kMlpOut};
  CHECK_CONTAINS(refusal(twice), "--site: mlp_out is named twice");
  PatchRequest outside;
  outside.positions = {static_cast<int64_t>(pair.clean.size())};
  CHECK_CONTAINS(refusal(outside), "--positions: position");
  const NoiseCorruption infinite{"Eiffel", INFINITY, 0};
  CHECK_THROWS_WITH_AS(noised_pair(*model.model, *model.tokenizer, "The Eiffel Tower", infinite),
                       doctest::Contains("--noise inf: must be a finite number above 0"), UsageError);
  // Quotes make digits a token: "0" is token 17 of this vocabulary, 0 the id 0.
  const at::Tensor logits = at::zeros({model.model->config().vocab_size});
  CHECK(resolve_metric(parse_metric("prob:'0'"), logits, logits, *model.tokenizer).answer.id == 17);
  CHECK(resolve_metric(parse_metric("prob:0"), logits, logits, *model.tokenizer).answer.id == 0);
}

TEST_CASE("a window wider than the model, and a range past the prompt, are bounded before they are spelled out") {
  // Regression: window_layers looped over every layer of the window, hanging on --layer-window 9e18.
  CHECK(window_layers(2, int64_t{9000000000000000000}, 4) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(window_layers(0, 3, 4) == std::vector<int64_t>{0, 1});
  CHECK(window_layers(3, 4, 4) == std::vector<int64_t>{1, 2, 3});
  // Regression: a range was expanded element by element before its bound was checked (8 GB for 0-999999999).
  CHECK_THROWS_WITH_AS(parse_index_list("--positions", "0-999999999", 12, "position", "prompt"),
                       doctest::Contains("--positions 0-999999999: position 999999999 is out of range: the prompt has 12 "
                                         "positions (0 to 11)"),
                       UsageError);
  // Regression: ten digits were "not a position number", and a list thousands of items long was quoted whole.
  CHECK_THROWS_WITH_AS(parse_index_list("--positions", "9999999999", 12, "position", "prompt"),
                       doctest::Contains("--positions 9999999999: position 9999999999 is out of range"), UsageError);
  std::string many;
  for (int i = 0; i < 20000; ++i) many += std::to_string(i) + ",";
  try {
    parse_index_list("--positions", many, 12, "position", "prompt");
    FAIL("accepted");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).size() < 200);
    CHECK_CONTAINS(std::string(e.what()), "--positions 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,2...: position 19999 "
                             "is out of range");
  }
}

TEST_CASE("the metric's tokens: a quoted comma, and ids past the tokenizer's tokens named or chosen") {
  // Regression: the comma that parts ANSWER from FOIL was the first, even inside quotes.
  CHECK(parse_metric("logit-diff:',',x").tokens == std::vector<std::string>{"','", "x"});
  CHECK(parse_metric("logit-diff:\",\",\"x\"").tokens == std::vector<std::string>{"\",\"", "\"x\""});
  const loading::SharedModel model = load_cpu("llama");
  const auto tokens = static_cast<int64_t>(model.tokenizer->vocab_size());
  // Regression: a logits row the tokenizer has no token for (Qwen's padded vocabulary) failed after both passes with
  // "token id N is not in the vocabulary", exit 1; it is the --metric flag's error, before any pass.
  const std::string refusal =
      fmt::format("--metric: token id {} is a row of the model's logits but not a token of its tokenizer", tokens + 1);
  CHECK_THROWS_WITH_AS(named_token_ids(parse_metric(fmt::format("prob:{}", tokens + 1)), *model.tokenizer, tokens + 10),
                       doctest::Contains(refusal.c_str()), UsageError);
  // Regression: an answer that is its own foil only warned, and every cell measured 0.
  CHECK_THROWS_WITH_AS(named_token_ids(parse_metric("logit-diff:2,2"), *model.tokenizer, tokens),
                       doctest::Contains("--metric: the answer 2 and the foil 2 are the same token (id 2)"), UsageError);
  // Chosen by the clean run's logits, such an id is kept, its token null.
  at::Tensor logits = at::zeros({tokens + 10});
  logits[tokens + 2] = 5.0;
  const Metric chosen = resolve_metric(parse_metric("prob"), logits, logits, *model.tokenizer);
  CHECK(chosen.answer.id == tokens + 2);
  CHECK_FALSE(chosen.answer.text.has_value());
  CHECK(chosen.to_json()["answer"]["token"].is_null());
}

TEST_CASE("patch_activations refuses flags no model is needed to judge before it loads one") {
  using probekit::testing::run_command;
  using probekit::testing::tool;
  probekit::testing::TempDir tmp;
  // A model folder that does not exist: a flag's refusal (exit 2) comes first, where it had loaded the model.
  const std::string base = fmt::format("{} --model {} --device cpu --clean 'a b' --output-dir {} ", tool("patch_activations"),
                                       tmp.file("no_model"), tmp.file("out"));
  probekit::testing::check_failure(run_command(base + "--corrupted 'a c' --layer-window 0"), 2, {"--layer-window 0: must be 1 or more"});
  probekit::testing::check_failure(run_command(base + "--corrupted 'a c' --site resid_pre"), 2,
                                   {"--site resid_pre: patching takes resid_post, attn_out or mlp_out"});
  probekit::testing::check_failure(run_command(base + "--corrupted 'a c' --site ln2_normalized"), 2,
                                   {"--site ln2_normalized: patching takes resid_post, attn_out or mlp_out (this site is "
                                    "read, never written"});
  probekit::testing::check_failure(run_command(base + "--corrupted 'a c' --method attribution --layer-window 3"), 2,
                                   {"--layer-window 3 with --method attribution"});
  probekit::testing::check_failure(run_command(base + "--corrupted 'a c' --method both --layer-window 3"), 2,
                                   {"--layer-window 3 with --method both"});
  // Regression: --noise and --seed with a corrupted prompt were ignored.
  for (const char* noise : {"--noise 5", "--seed 4", "--seed 0", "--noise 3"}) {  // 0 and 3: the defaults, given
    probekit::testing::check_failure(run_command(base + "--corrupted 'a c' " + noise), 2,
                                     {"--noise and --seed go with --corruption noise"});
  }
  probekit::testing::check_failure(run_command(base + "--corruption noise --subject a --noise -1"), 2,
                                   {"--noise -1: must be a finite number above 0"});
  // Regression: --seed -1 wrapped to 18446744073709551615.
  probekit::testing::check_failure(run_command(base + "--corruption noise --subject a --seed -1"), 2,
                                   {"--seed: must be 0 or more, got -1"});
  // Regression: a seed past 2^64 - 1 ran as 2^64 - 1.
  probekit::testing::check_failure(run_command(base + "--corruption noise --subject a --seed 18446744073709551616"), 2,
                                   {"--seed: must be from 0 to 9223372036854775807, got 18446744073709551616"});
}

TEST_CASE("patch_activations refuses a misspelt --site with patching's own sites, naming the nearest") {
  // Regression: a name that is no site got capture's list (resid_pre, ..., router, experts), sites patching refuses.
  using probekit::testing::run_command;
  using probekit::testing::tool;
  probekit::testing::TempDir tmp;
  const std::string base = fmt::format("{} --model {} --device cpu --clean 'a b' --corrupted 'a c' --output-dir {} ",
                                       tool("patch_activations"), tmp.file("no_model"), tmp.file("out"));
  probekit::testing::CommandResult r = run_command(base + "--site resid_postt");
  probekit::testing::check_failure(
      r, 2, {"--site resid_postt: patching takes resid_post, attn_out or mlp_out (did you mean resid_post?)"});
  CHECK_MESSAGE(r.output.find("router") == std::string::npos, r.output);
  probekit::testing::check_failure(run_command(base + "--site resid_post,mlp_outt"), 2,
                                   {"--site mlp_outt: patching takes resid_post, attn_out or mlp_out (did you mean mlp_out?)"});
  r = run_command(base + "--site nonsense");
  probekit::testing::check_failure(r, 2, {"--site nonsense: patching takes resid_post, attn_out or mlp_out"});
  CHECK_MESSAGE(r.output.find("did you mean") == std::string::npos, r.output);
}

TEST_CASE("Ctrl-C during patching stops it, leaving the output directory as it was") {
  probekit::testing::TempDir tmp;
  // A prompt of about 400 tokens, three sites: tens of seconds of cells (regression: the tool died of the signal,
  // saying nothing and leaving its staging directory behind).
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(fixture_model("llama"));
  std::string prompt;
  while (tokenizer.encode(prompt, true).size() < 400) prompt += "the cat sat on the mat and ";
  const std::string patch = fmt::format("{} --model {} --device cpu --clean '{} x' --corrupted '{} y' --site "
                                        "resid_post,attn_out,mlp_out --rows-per-batch 1 --output-dir {} -q",
                                        probekit::testing::tool("patch_activations"), fixture_model("llama"), prompt,
                                        prompt, tmp.file("out"));
  // The signal goes once the staging directory is there: the tool's handler is in place by then. sh starts a background
  // job with SIGINT ignored, which the tool keeps: env gives it the default, as a terminal's foreground job has it.
  const probekit::testing::CommandResult r = probekit::testing::run_command(fmt::format(
      "{{ env --default-signal=INT {} & pid=$!; for i in $(seq 600); do ls -d {}.partial-* >/dev/null 2>&1 && break; sleep 0.1; done; sleep 1; "
      "kill -INT $pid; wait $pid; echo \"exit $?\"; }}",
      patch, tmp.file("out")));
  CHECK_CONTAINS(r.output, std::string("interrupted: ") + kPatchInterruptNote);
  CHECK_CONTAINS(r.output, "exit 130");
  CHECK(list_directory(tmp.path()).empty());
}
