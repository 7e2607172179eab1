// Generation against transformers' greedy generate (the fixtures' generation.json: fp32, eager attention, 16 new
// tokens, the top-5 logits of each step) for every fixture model; batching, stops and sampling; and the probes'
// rows read while generating against the same rows read afterwards by read_prefixes (--per-token's reading); and
// a model split over two devices against one.
#include <CLI/CLI.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "common/json.h"
#include "generation/flags.h"
#include "generation/generator.h"
#include "generation/sampling.h"
#include "model/fused_ops.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "readout/incremental.h"
#include "activations/readout_recipe.h"
#include "readout/prompts.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "generation_checks.h"
#include "split_devices.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

model::TransformerModel load_generator(const std::string& dir) {
  model::LoadOptions options;
  options.lm_head = true;
  return model::TransformerModel::load(dir, options);
}

// Generates greedily after each prompt alone; returns the new ids and each step's top-5.
std::pair<std::vector<int32_t>, Steps> generate_alone(const model::TransformerModel& model, const readout::Sequence& prompt,
                                                     int64_t new_tokens) {
  generation::GenerationOptions options;
  options.max_new_tokens = new_tokens;
  options.top_logits = 5;
  // transformers made the references with the eos ids suppressed (min_new_tokens): --no-stop.
  options.suppressed_ids = generation::read_stop_ids(model.dir());
  Steps steps;
  auto result = generation::generate(model, {prompt}, options, nullptr, [&](const generation::GeneratedToken& token) {
    steps.top_ids.push_back(token.top_ids);
    steps.top_logits.push_back(token.top_logits);
    return true;
  });
  return {result[0].ids, steps};
}

void check_generation_parity(const std::string& name) {
  const std::string dir = fixture_model(name);
  model::TransformerModel model = load_generator(dir);
  Json reference = read_json_file(dir + "/generation.json");
  for (size_t i = 0; i < reference["cases"].size(); ++i) {
    const Json& c = reference["cases"][i];
    auto [ids, steps] = generate_alone(model, c["prompt_ids"].get<readout::Sequence>(),
                                       static_cast<int64_t>(c["generated_ids"].size()));
    check_case(name, i, c, ids, steps);
  }
}

}  // namespace

#define GENERATION_TEST(name) \
  TEST_CASE("greedy generation matches transformers: " name * doctest::test_suite("numeric")) { check_generation_parity(name); }

GENERATION_TEST("llama")
GENERATION_TEST("llama_bf16")
GENERATION_TEST("mistral")
GENERATION_TEST("qwen2")
GENERATION_TEST("qwen3")
GENERATION_TEST("qwen3_sharded")
GENERATION_TEST("gemma")
GENERATION_TEST("gemma2")
GENERATION_TEST("gemma3_text")
GENERATION_TEST("gemma3_multimodal")
GENERATION_TEST("gemma3_multimodal_hub_layout")
GENERATION_TEST("gpt2")
GENERATION_TEST("gpt_neox")
GENERATION_TEST("mixtral")
GENERATION_TEST("qwen3_moe")
GENERATION_TEST("qwen2_moe")
GENERATION_TEST("phi3")
GENERATION_TEST("phi3_longrope")
GENERATION_TEST("olmo2")
GENERATION_TEST("olmo3")
GENERATION_TEST("smollm3")
GENERATION_TEST("gemma4_text")
// Attention sinks and sliding windows (8) through the generation cache, past the window.
GENERATION_TEST("gpt_oss")
GENERATION_TEST("qwen3_5_text")
GENERATION_TEST("qwen3_next")
// Latent attention: the prompt's pass expanded, each step in the absorbed form over the cached latents.
GENERATION_TEST("deepseek_v3")

namespace {

// Every new token of every row, by row.
struct Collected {
  std::vector<std::vector<generation::GeneratedToken>> tokens;
  std::vector<generation::Generation> results;
};

Collected generate_batch(const model::TransformerModel& model, const std::vector<readout::Sequence>& prompts,
                         const generation::GenerationOptions& options, const generation::ProbeReadout* probes = nullptr,
                         const generation::TokenCallback& also = {}) {
  Collected collected;
  collected.tokens.resize(prompts.size());
  collected.results = generation::generate(model, prompts, options, probes, [&](const generation::GeneratedToken& token) {
    collected.tokens[token.row].push_back(token);
    return also ? also(token) : true;
  });
  return collected;
}

}  // namespace

TEST_CASE("prompts of different lengths generated in one batch give each prompt's own generation") {
  // A sliding window (gemma3_text: 8), routed experts (mixtral), longrope crossing its limit (phi3_longrope) and
  // recurrent states that must stop at each prompt's end, not at the batch's (qwen3_5_text), and latents cached
  // after a shorter prompt's padding (deepseek_v3).
  for (const char* name : {"gemma3_text", "mixtral", "phi3_longrope", "gpt2", "qwen3_5_text", "deepseek_v3"}) {
    model::TransformerModel model = load_generator(fixture_model(name));
    std::vector<readout::Sequence> prompts = fixture_prompts(name);
    generation::GenerationOptions options;
    options.max_new_tokens = 12;
    options.top_logits = 5;
    Collected batch = generate_batch(model, prompts, options);
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto alone = generate_alone(model, prompts[b], 12);
      const auto& ids = alone.first;
      const auto& steps = alone.second;
      CHECK_MESSAGE(batch.results[b].ids == ids, name, " row ", b, ": ", fmt::format("{}", batch.results[b].ids), " vs ",
                    fmt::format("{}", ids));
      for (size_t s = 0; s < ids.size(); ++s) {
        const auto& token = batch.tokens[b][s];
        CHECK(token.index == static_cast<int64_t>(s));
        CHECK(token.position == static_cast<int64_t>(prompts[b].size() + s));
        for (size_t i = 0; i < 5; ++i) {
          CHECK_MESSAGE(std::abs(token.top_logits[i] - steps.top_logits[s][i]) <= 1e-4 * std::abs(steps.top_logits[s][0]),
                        name, " row ", b, " step ", s);
        }
      }
    }
  }
}

TEST_CASE("each row stops at its own eos id, keeps it, and the others go on, and a callback can stop one row") {
  model::TransformerModel model = load_generator(fixture_model("llama"));
  std::vector<readout::Sequence> prompts = fixture_prompts("llama");
  std::vector<int32_t> free_run = generate_alone(model, prompts[1], 16).first;
  generation::GenerationOptions options;
  options.max_new_tokens = 16;
  options.stop_ids = {free_run[4]};
  Collected collected = generate_batch(model, prompts, options);
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::vector<int32_t> alone = generate_alone(model, prompts[b], 16).first;
    auto stop = std::find(alone.begin(), alone.end(), free_run[4]);
    std::vector<int32_t> expected(alone.begin(), stop == alone.end() ? alone.end() : stop + 1);
    CHECK_MESSAGE(collected.results[b].ids == expected, "row ", b);
    CHECK(collected.results[b].stop == (stop == alone.end() ? generation::StopReason::kLength : generation::StopReason::kEos));
    CHECK(collected.tokens[b].back().last);
  }
  CHECK(collected.results[1].ids.size() <= 5);

  options.stop_ids.clear();
  Collected cancelled = generate_batch(model, prompts, options, nullptr, [](const generation::GeneratedToken& token) {
    return !(token.row == 0 && token.index == 2);
  });
  CHECK(cancelled.results[0].ids.size() == 3);
  CHECK(cancelled.results[0].stop == generation::StopReason::kCancelled);
  CHECK(cancelled.results[2].ids == generate_alone(model, prompts[2], 16).first);
}

TEST_CASE("eos ids come from generation_config.json, else config.json") {
  CHECK(generation::read_stop_ids(fixture_model("llama")) == std::vector<int32_t>{2});
  CHECK(generation::read_stop_ids(fixture_model("qwen2")).empty());
  testing::TempDir dir;
  testing::write_text(dir.file("config.json"), R"({"eos_token_id": [5, 7]})");
  CHECK(generation::read_stop_ids(dir.path()) == std::vector<int32_t>{5, 7});
  testing::write_text(dir.file("generation_config.json"), R"({"eos_token_id": 9})");
  CHECK(generation::read_stop_ids(dir.path()) == std::vector<int32_t>{9});
  testing::write_text(dir.file("generation_config.json"), R"({"eos_token_id": "end"})");
  CHECK_THROWS_WITH_AS(generation::read_stop_ids(dir.path()), doctest::Contains("'eos_token_id' must be a token id"),
                       std::runtime_error);
}

TEST_CASE("sampling: temperature, top-k and top-p draw from the distribution they leave") {
  // Two tokens with probabilities 1/4 and 3/4 (logits 0 and ln 3).
  at::Tensor logits = at::tensor({0.0f, static_cast<float>(std::log(3.0))}).unsqueeze(0).expand({4000, 2}).contiguous();
  auto share_of_second = [&](generation::Sampling sampling) {
    generation::TokenSampler sampler(sampling);
    return sampler.choose(logits).to(at::kDouble).mean().item<double>();
  };
  CHECK(share_of_second({1.0, 0, 1.0, 1}) == doctest::Approx(0.75).epsilon(0.04));
  // Temperature 0.5 squares the odds: 1 : 9.
  CHECK(share_of_second({0.5, 0, 1.0, 2}) == doctest::Approx(0.9).epsilon(0.03));
  CHECK(share_of_second({1.0, 1, 1.0, 3}) == 1.0);
  CHECK(share_of_second({1.0, 0, 0.5, 4}) == 1.0);  // 3/4 alone reaches p = 0.5
  CHECK(share_of_second({1.0, 0, 0.8, 5}) == doctest::Approx(0.75).epsilon(0.04));
  CHECK(share_of_second({0.0, 0, 1.0, 6}) == 1.0);  // greedy
  CHECK_THROWS_WITH_AS(generation::TokenSampler({-1.0, 0, 1.0, 0}), doctest::Contains("--temperature"),
                       std::invalid_argument);
  // p = 0 keeps the most probable token alone, as transformers and OpenAI's API take it (regression: refused).
  CHECK(share_of_second({1.0, 0, 0.0, 7}) == 1.0);
  CHECK_THROWS_WITH_AS(generation::TokenSampler({1.0, 0, -0.1, 0}), doctest::Contains("--top-p must be from 0 to 1"),
                       std::invalid_argument);
}

TEST_CASE("sampled generation: a seed repeats its tokens, top-k 1 is greedy") {
  model::TransformerModel model = load_generator(fixture_model("qwen3"));
  std::vector<readout::Sequence> prompts = fixture_prompts("qwen3");
  generation::GenerationOptions options;
  options.max_new_tokens = 16;
  options.sampling = {1.0, 0, 0.95, 11};
  auto first = generate_batch(model, prompts, options).results;
  auto again = generate_batch(model, prompts, options).results;
  options.sampling.seed = 12;
  auto other = generate_batch(model, prompts, options).results;
  CHECK(first[0].ids == again[0].ids);
  CHECK(first[2].ids == again[2].ids);
  CHECK((first[0].ids != other[0].ids || first[1].ids != other[1].ids || first[2].ids != other[2].ids));
  // A row samples as itself: prompt b generated alone as row b draws the numbers it drew in the batch.
  options.sampling.seed = 11;
  for (size_t b = 0; b < prompts.size(); ++b) {
    generation::GenerationOptions alone = options;
    alone.first_row = b;
    CHECK(generate_batch(model, {prompts[b]}, alone).results[0].ids == first[b].ids);
  }
  // Two rows of one prompt draw numbers of their own; rows given one key draw the same (a sweep's cells of a prompt).
  auto twice = generate_batch(model, {prompts[0], prompts[0]}, options).results;
  CHECK(twice[0].ids == first[0].ids);
  CHECK(twice[1].ids != twice[0].ids);
  generation::GenerationOptions keyed = options;
  keyed.row_keys = {2, 2};
  auto same_key = generate_batch(model, {prompts[2], prompts[2]}, keyed).results;
  CHECK(same_key[0].ids == first[2].ids);
  CHECK(same_key[1].ids == first[2].ids);
  options.sampling = {1.0, 1, 1.0, 13};
  auto top1 = generate_batch(model, prompts, options).results;
  for (size_t b = 0; b < prompts.size(); ++b) CHECK(top1[b].ids == generate_alone(model, prompts[b], 16).first);
}

TEST_CASE("sampling flags at temperature 0 are said to change nothing") {
  generation::GenerationFlags flags;
  CLI::App app;
  generation::add_generation_flags(app, flags);
  std::vector<std::string> arguments = {"0.5", "--top-p"};  // CLI11 reads the vector from its end
  app.parse(arguments);
  testing::LoggedLines log;
  generation::resolve_generation_flags(flags, fixture_model("qwen3"));
  // Regression: taken without a word, as if greedy decoding read them.
  CHECK_CONTAINS(log.text(), "change nothing at --temperature 0 (greedy decoding)");
  flags.options.sampling.temperature = 1;
  testing::LoggedLines sampled;
  generation::resolve_generation_flags(flags, fixture_model("qwen3"));
  CHECK(sampled.text().find("change nothing") == std::string::npos);
  // A request draws a seed of its own at temperature 0 (the server's chat completions): nothing to warn of.
  generation::GenerationFlags request;
  request.options.sampling.seed = 12345;
  testing::LoggedLines quiet;
  generation::resolve_generation_flags(request, fixture_model("qwen3"));
  CHECK(quiet.text().find("change nothing") == std::string::npos);
}

namespace {

// The probes' rows read while generating equal what read_prefixes (--per-token) reads afterwards for the same
// text (prompt + new tokens) at each new token's position, row for row of a batch, within `tolerance` x the row's
// largest value.
void check_rows_while_generating(const std::string& name, const readout::Request& request, const readout::Sequence& suffix,
                                 double tolerance = 1e-5) {
  model::TransformerModel model = load_generator(fixture_model(name));
  std::vector<readout::Sequence> prompts = fixture_prompts(name);
  generation::GenerationOptions options;
  options.max_new_tokens = 6;
  generation::ProbeReadout probes{request, suffix};
  Collected collected = generate_batch(model, prompts, options, &probes);
  for (size_t b = 0; b < prompts.size(); ++b) {
    readout::Sequence text = prompts[b];
    text.insert(text.end(), collected.results[b].ids.begin(), collected.results[b].ids.end());
    at::Tensor afterwards = readout::read_prefixes(model, text, suffix, request);
    for (const generation::GeneratedToken& token : collected.tokens[b]) {
      REQUIRE(token.rows.defined());
      at::Tensor expected = afterwards[token.position];
      double error = (token.rows - expected).abs().max().item<double>() / expected.abs().max().item<double>();
      CHECK_MESSAGE(error <= tolerance, name, " row ", b, " token ", token.index, ": relative error ", error);
    }
  }
}

readout::Sequence anchor_suffix(const std::string& name) {
  return tokenizer::Tokenizer::from_file(fixture_model(name)).encode(activations::kDefaultPromptSuffix, false);
}

}  // namespace

TEST_CASE("probes read each new token as --per-token reads that position: the token plus the suffix") {
  readout::Request residual{Site::kResidPost, Position::kLast, {1, 3}, 0};
  check_rows_while_generating("llama", residual, anchor_suffix("llama"));
  // Without a suffix the probes read the token itself.
  check_rows_while_generating("llama", residual, {});
  // Sliding windows (gemma2: 8) over the suffix, attention soft-capping; another site.
  check_rows_while_generating("gemma2", {Site::kResidMid, Position::kLast, {0, 2}, 0},
                              anchor_suffix("gemma2"));
  // The router's logits of a MoE layer.
  check_rows_while_generating("qwen3_moe", {Site::kRouter, Position::kLast, {0, 2}, 0},
                              anchor_suffix("qwen3_moe"));
  // Attention sinks over the cached prefix and within the window (gpt_oss: 8).
  check_rows_while_generating("gpt_oss", residual, anchor_suffix("gpt_oss"));
  // Gated DeltaNet layers: the suffix of each step must leave their states as the new token left them. Their
  // states sum the tokens in another order here (the prompt in chunks, then a token at a time) than when each
  // prefix runs in one pass: fp32 rounding, up to 2e-5 through the experts (with the suffix left in the states: 0.2 to 0.7).
  check_rows_while_generating("qwen3_next", residual, anchor_suffix("qwen3_next"), 1e-4);
  // Latent attention: the suffix attends over the cached latents in the absorbed form, read_prefixes over the
  // recorded ones expanded. The experts' site, whose ids must not flip between the two.
  check_rows_while_generating("deepseek_v3", residual, anchor_suffix("deepseek_v3"), 1e-4);
  check_rows_while_generating("deepseek_v3", {Site::kExperts, Position::kLast, {1, 3}, 0},
                              anchor_suffix("deepseek_v3"), 1e-4);
}

TEST_CASE("a model split over two devices generates the ids, logits and probe rows of one device, bitwise (fp32)") {
  // Sliding windows with local and global ropes (gemma3_text), a rope that depends on the length
  // (phi3_longrope), learned positions (gpt2) and routers read at their site (mixtral).
  const std::pair<std::string, Site> cases[] = {{"gemma3_text", Site::kResidPost},
                                                         {"phi3_longrope", Site::kResidPost},
                                                         {"gpt2", Site::kResidMid},
                                                         {"mixtral", Site::kRouter}};
  for (const auto& entry : cases) {
    const auto& name = entry.first;
    const auto& site = entry.second;
    model::TransformerModel whole = load_generator(fixture_model(name));
    model::LoadOptions options;
    options.lm_head = true;
    const int64_t layers = whole.loaded_layers();
    options.layer_devices = probekit::testing::cpu_split_devices(layers);
    model::TransformerModel split = model::TransformerModel::load(fixture_model(name), options);
    // Prompts of different lengths in one batch; every row runs all its tokens (eos ids suppressed). The probes
    // read a layer of each stage: the first, the first on cpu:0, the last.
    std::vector<readout::Sequence> prompts = fixture_prompts(name);
    generation::GenerationOptions generating;
    generating.max_new_tokens = 8;
    generating.top_logits = 5;
    generating.suppressed_ids = generation::read_stop_ids(fixture_model(name));
    generation::ProbeReadout probes{{site, Position::kLast, {0, layers / 3, layers - 1}, 0}, anchor_suffix(name)};
    Collected one = generate_batch(whole, prompts, generating, &probes);
    Collected two = generate_batch(split, prompts, generating, &probes);
    for (size_t b = 0; b < prompts.size(); ++b) {
      CHECK_MESSAGE(two.results[b].ids == one.results[b].ids, name, " row ", b, ": ",
                    fmt::format("{}", two.results[b].ids), " vs ", fmt::format("{}", one.results[b].ids));
      REQUIRE(two.tokens[b].size() == one.tokens[b].size());
      for (size_t s = 0; s < one.tokens[b].size(); ++s) {
        const generation::GeneratedToken &found = two.tokens[b][s], &expected = one.tokens[b][s];
        CHECK_MESSAGE(found.top_logits == expected.top_logits, name, " row ", b, " token ", s);
        CHECK_MESSAGE(at::equal(found.rows, expected.rows), name, " row ", b, " token ", s, ": rows differ by ",
                      (found.rows - expected.rows).abs().max().item<double>());
      }
    }
  }
}

TEST_CASE("inspect_model generate writes generation.json's format: transformers' ids and top-5 logits") {
  testing::TempDir out;
  const std::string dir = fixture_model("gemma2");  // final logit soft-capping
  const Json reference = read_json_file(dir + "/generation.json");
  const Json& expected = reference["cases"][1];
  testing::CommandResult r = testing::run_command(fmt::format(
      "{} generate --model {} --text {} --max-new-tokens 16 --no-stop --device cpu --output {} -q", testing::tool("inspect_model"), dir,
      shell_quoted(expected["prompt"].get<std::string>()), out.file("generation.json")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Json written = read_json_file(out.file("generation.json"));
  const Json& got = written["cases"][0];
  CHECK(got["prompt_ids"] == expected["prompt_ids"]);
  CHECK(got["generated_ids"] == expected["generated_ids"]);
  REQUIRE(got["top5"].size() == 16);
  for (size_t s = 0; s < 16; ++s) {
    CHECK(got["top5"][s]["ids"] == expected["top5"][s]["ids"]);
    for (size_t i = 0; i < 5; ++i) {
      CHECK(std::abs(got["top5"][s]["logits"][i].get<double>() - expected["top5"][s]["logits"][i].get<double>()) <=
            1e-4 * std::abs(expected["top5"][s]["logits"][0].get<double>()));
    }
  }
  testing::check_failure(testing::run_command(fmt::format("{} generate --model {} --text hi --temperature -1 --output {}",
                                                          testing::tool("inspect_model"), dir, out.file("x.json"))),
                         2, {"--temperature must be 0 (greedy) or positive, got -1"});
  testing::check_failure(testing::run_command(fmt::format("{} generate --model {} --text hi --top-p 1.5 --output {}",
                                                          testing::tool("inspect_model"), dir, out.file("x.json"))),
                         2, {"--top-p must be from 0 to 1, got 1.5"});
}

TEST_CASE("the LM head is read only for generation: untied from its own weight, tied from the embeddings") {
  model::LoadOptions ranking;
  model::LoadOptions generating;
  generating.lm_head = true;
  for (const char* name : {"qwen2", "gpt_neox", "qwen3"}) {
    std::vector<std::string> without = model::tensors_to_read(fixture_model(name), ranking);
    std::vector<std::string> with = model::tensors_to_read(fixture_model(name), generating);
    for (const std::string& tensor : without) CHECK_MESSAGE(tensor.find("lm_head") == std::string::npos, tensor);
    const bool untied = std::string(name) != "qwen3";
    CHECK_MESSAGE(with.size() == without.size() + (untied ? 1 : 0), name);
  }
  model::TransformerModel ranking_model = model::TransformerModel::load(fixture_model("qwen2"), ranking);
  CHECK_FALSE(ranking_model.has_lm_head());
  CHECK_THROWS_WITH_AS(generation::generate(ranking_model, {{1, 2}}, {}, nullptr, {}),
                       doctest::Contains("LM head"), std::invalid_argument);
  Json untied_gemma = read_json_file(fixture_model("gemma") + "/config.json");
  untied_gemma["tie_word_embeddings"] = false;
  testing::TempDir gemma;
  testing::copy_dir(fixture_model("gemma"), gemma.path());
  write_json_file(gemma.file("config.json"), untied_gemma);
  CHECK_THROWS_WITH_AS(model::TransformerModel::load(gemma.path(), generating),
                       doctest::Contains("no LM head lm_head.weight (config.json does not tie it"), std::runtime_error);
}

TEST_CASE("learned positions bound prompt, new tokens and suffix together, with an error that says so") {
  model::TransformerModel model = load_generator(fixture_model("gpt2"));  // 512 positions
  generation::GenerationOptions options;
  options.max_new_tokens = 10;
  readout::Sequence prompt(500, 5);
  generation::ProbeReadout probes{{Site::kResidPost, Position::kLast, {1}, 0}, readout::Sequence(3, 7), {}};
  CHECK_THROWS_WITH_AS(generation::generate(model, {prompt}, options, &probes, [](const auto&) { return true; }),
                       doctest::Contains("the longest prompt (500 tokens), 10 new tokens and the probes' prompt suffix "
                                         "(3 tokens) need 513 positions, more than the model's 512"),
                       std::invalid_argument);
  options.max_new_tokens = 9;
  int64_t tokens = 0;
  generation::generate(model, {prompt}, options, &probes, [&](const generation::GeneratedToken& token) {
    CHECK(token.position == 500 + tokens++);
    return true;
  });
  CHECK(tokens == 9);
}

TEST_CASE("sampling: any positive temperature works, however small, and near 0 it is greedy") {
  // Regression: logits / 1e-40 overflowed to infinity and the softmax turned to NaN, so tokens were arbitrary.
  at::Tensor logits = at::randn({16, 1000}, at::TensorOptions().dtype(at::kFloat)) * 10;
  logits.index_put_({0, 7}, -std::numeric_limits<float>::infinity());  // a suppressed token stays suppressed
  at::Tensor greedy = logits.argmax(-1);
  for (double temperature : {1e-6, 1e-30, 1e-40, 1e-300, 5e-324}) {
    CAPTURE(temperature);
    at::Tensor scaled = generation::scaled_logits(logits, temperature);
    CHECK_FALSE(at::isnan(scaled).any().item<bool>());
    CHECK_FALSE(at::isposinf(scaled).any().item<bool>());
    CHECK(std::isinf(scaled[0][7].item<float>()));
    for (uint64_t seed : {1, 2, 3}) {
      generation::TokenSampler sampler({temperature, 0, 1.0, seed});
      CHECK(at::equal(sampler.choose(logits), greedy));
      generation::TokenSampler nucleus({temperature, 40, 0.9, seed});
      CHECK(at::equal(nucleus.choose(logits), greedy));
    }
  }
  // The shift changes nothing at ordinary temperatures: the softmax of logits / T.
  at::Tensor expected = at::softmax(logits / 0.7, -1);
  CHECK(at::allclose(at::softmax(generation::scaled_logits(logits, 0.7), -1), expected, 1e-5, 1e-7));
  // The CLI: inspect_model generate at 1e-40 writes the greedy tokens.
  testing::TempDir out;
  auto generated = [&](const std::string& temperature) {
    testing::CommandResult r = testing::run_command(fmt::format(
        "{} generate --model {} --text 'Once upon a time' --max-new-tokens 12 --no-stop --temperature {} --device cpu "
        "--output {} --overwrite -q",
        testing::tool("inspect_model"), fixture_model("llama"), temperature, out.file("g.json")));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return read_json_file(out.file("g.json"))["cases"][0]["generated_ids"];
  };
  Json greedy_ids = generated("0");
  CHECK(generated("1e-40") == greedy_ids);
  CHECK(generated("1e-300") == greedy_ids);
}

TEST_CASE("--max-new-tokens: a cache past the device's memory is refused naming the flag; 0 reads as other flag errors") {
  testing::TempDir out;
  const std::string run = fmt::format("{} generate --model {} --text hi --device cpu --output {}", testing::tool("inspect_model"),
                                      fixture_model("llama"), out.file("g.json"));
  // Regression: the cache, sized up front, ended in LibTorch's allocation failure with a C++ backtrace.
  testing::CommandResult r = testing::run_command(run + " --max-new-tokens 1000000000");
  testing::check_failure(r, 2, {"--max-new-tokens 1000000000: the generation cache", "GB on cpu, more than its",
                                "ask for fewer new tokens"});
  CHECK(r.output.find("frame #") == std::string::npos);
  CHECK(r.output.find("alloc") == std::string::npos);
  testing::check_named_flags(testing::tool("inspect_model") + " generate", r.output);
  // Regression: 0 printed a range up to a 309-digit number, and without the tools' prefix.
  r = testing::run_command(run + " --max-new-tokens 0");
  testing::check_failure(r, 2, {"[error] --max-new-tokens: must be 1 or more, got 0", "[error] Run with --help for the flags."});
  CHECK(r.output.size() < 200);
  testing::check_failure(testing::run_command(run + " --max-new-tokens many"), 2, {"--max-new-tokens: must be a whole number, got many"});
  // The other flags checked the same way.
  testing::check_failure(testing::run_command(fmt::format("{} --probes-dir x --top-k 0", testing::tool("multi_probe_inference"))),
                         2, {"[error] --top-k: must be 1 or more, got 0"});
  testing::check_failure(testing::run_command(fmt::format("{} --model x --dataset y --output-dir z --max-length -1",
                                                          testing::tool("capture_activations"))),
                         2, {"[error] --max-length: must be 0 or more, got -1"});
}

TEST_CASE("rotary models generate past max_position_embeddings, as transformers lets them; learned positions are a bound") {
  // Rotary positions are computed, not looked up: the same tokens whatever the config says.
  testing::TempDir dir;
  testing::copy_dir(fixture_model("qwen3"), dir.path());
  Json config = read_json_file(dir.file("config.json"));
  config["max_position_embeddings"] = 8;
  write_json_file(dir.file("config.json"), config);
  readout::Sequence prompt = fixture_prompts("qwen3").front();
  auto [capped, steps] = generate_alone(load_generator(dir.path()), prompt, 16);
  CHECK(static_cast<int64_t>(prompt.size()) + 16 > 8);
  CHECK(capped == generate_alone(load_generator(fixture_model("qwen3")), prompt, 16).first);
  // Learned positions: the bound, named with the flag.
  model::TransformerModel gpt2 = load_generator(fixture_model("gpt2"));
  generation::GenerationOptions options;
  options.max_new_tokens = 600;
  CHECK_THROWS_WITH_AS(generation::generate(gpt2, {{1, 2, 3}}, options, nullptr, [](const auto&) { return true; }),
                       doctest::Contains("more than the model's 512: ask for fewer new tokens (--max-new-tokens)"),
                       std::invalid_argument);
}

TEST_CASE("rows that join (one, then two together) and leave between steps generate as alone, Gated DeltaNet states and latent caches included") {
  for (const char* name : {"qwen3_5_text", "qwen3_next", "deepseek_v3"}) {
    CAPTURE(name);
    model::TransformerModel model = load_generator(fixture_model(name));
    const Json reference = read_json_file(fixture_model(name) + "/generation.json");
    std::vector<readout::Sequence> prompts = fixture_prompts(name);
    auto greedy = [&](const at::Tensor& final_norm) { return model.logits(final_norm).argmax(-1); };
    std::vector<std::vector<int64_t>> ids(3);
    readout::IncrementalReader reader(model, nullptr, {});
    auto run = [&](at::Tensor next, const std::vector<size_t>& rows, int steps) {
      for (int s = 0; s < steps; ++s) {
        for (size_t r = 0; r < rows.size(); ++r) ids[rows[r]].push_back(next[static_cast<int64_t>(r)].item<int64_t>());
        next = greedy(reader.step(next, at::ones({next.size(0)}, at::kLong)).final_norm);
      }
      return next;
    };
    // Prompt 0 alone for 3 tokens; prompts 1 and 2 (of other lengths) join together for 4 tokens of all three;
    // prompt 0 leaves, prompts 1 and 2 go on for 4.
    at::Tensor next = run(greedy(reader.start({prompts[0]}, 12)), {0}, 3);
    next = run(at::cat({next, greedy(reader.join({prompts[1], prompts[2]}, 12, nullptr))}), {0, 1, 2}, 4);
    reader.keep_rows({1, 2});
    run(next.narrow(0, 1, 2), {1, 2}, 4);
    for (size_t b = 0; b < 3; ++b) {
      std::vector<int64_t> expected = reference["cases"][b]["generated_ids"].get<std::vector<int64_t>>();
      expected.resize(ids[b].size());
      CHECK_MESSAGE(ids[b] == expected, "row ", b, ": ", fmt::format("{}", ids[b]), " vs ", fmt::format("{}", expected));
    }
  }
}

TEST_CASE("a step's visible slots: two shapes with fused attention (short rows, then the whole cache), else steps of 64") {
  const int64_t short_slots = model::fused::kCachedAttentionShortSlots;
  // Fused attention: short rows see the short slots (or the whole cache when it is smaller), longer rows all of it.
  CHECK(readout::step_visible_slots(true, 14, 1024) == short_slots);
  CHECK(readout::step_visible_slots(true, short_slots, 1024) == short_slots);
  CHECK(readout::step_visible_slots(true, short_slots + 1, 1024) == 1024);
  CHECK(readout::step_visible_slots(true, 900, 1024) == 1024);
  CHECK(readout::step_visible_slots(true, 14, 192) == 192);
  // Without it: the reach rounded up to 64, never past the capacity.
  CHECK(readout::step_visible_slots(false, 14, 1024) == 64);
  CHECK(readout::step_visible_slots(false, 64, 1024) == 64);
  CHECK(readout::step_visible_slots(false, 65, 1024) == 128);
  CHECK(readout::step_visible_slots(false, 1000, 1000) == 1000);
}
