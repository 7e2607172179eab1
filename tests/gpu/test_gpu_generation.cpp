// Generation on a CUDA GPU: in fp32 the same greedy ids and top-5 logits as transformers' generate (the fixtures'
// generation.json, within 1e-4 x the step's largest |logit|); in bf16 the probes' rows read while generating
// agree with read_prefixes over the finished text, a batch of prompts of different lengths and a row growing from the
// per-query attention kernel's short rows into the tiled kernel's long ones included; decode steps replayed as CUDA
// graphs give bitwise what eager steps give.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "common/json.h"
#include "generation/generator.h"
#include "model/decoder_block.h"
#include "model/fused_ops.h"
#include "model/random_checkpoint.h"
#include "model/transformer.h"
#include "readout/incremental.h"
#include "readout/readout.h"
#include "generation_checks.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const char* const kFixtures[] = {"llama",       "llama_bf16",        "mistral",
                                 "qwen2",       "qwen3",             "qwen3_sharded",
                                 "gemma",       "gemma2",            "gemma3_text",
                                 "gemma3_multimodal", "gemma3_multimodal_hub_layout", "gpt2",
                                 "gpt_neox",    "mixtral",           "qwen3_moe",
                                 "qwen2_moe",   "phi3",              "phi3_longrope",
                                 "olmo2",       "olmo3",             "smollm3",
                                 "gemma4_text", "qwen3_5_text", "qwen3_next",
                                 "gpt_oss",     "deepseek_v3"};

std::string fixture(const std::string& name) { return std::string(PROBEKIT_FIXTURES) + "/models/" + name; }

model::TransformerModel load_dir_on_gpu(const std::string& dir, at::ScalarType dtype) {
  model::LoadOptions options;
  options.lm_head = true;
  options.device = at::Device(at::kCUDA, 0);
  options.dtype = dtype;
  return model::TransformerModel::load(dir, options);
}

model::TransformerModel load_on_gpu(const std::string& name, at::ScalarType dtype) {
  return load_dir_on_gpu(fixture(name), dtype);
}

const generation::ProbeReadout kProbes{{Site::kResidPost, Position::kLast, {1, 3}, 0}, {5, 6, 7, 8}, {}};

// The rows kProbes read at each new token while `model` generates from `prompts` against read_prefixes over each
// finished text at that token: a cosine of 0.999 or more.
void check_rows_while_generating(const model::TransformerModel& model, const std::string& name,
                                 const std::vector<readout::Sequence>& prompts, int64_t new_tokens) {
  generation::GenerationOptions options;
  options.max_new_tokens = new_tokens;
  std::vector<std::vector<generation::GeneratedToken>> tokens(prompts.size());
  std::vector<generation::Generation> results =
      generation::generate(model, prompts, options, &kProbes, [&](const generation::GeneratedToken& token) {
        tokens[token.row].push_back(token);
        return true;
      });
  for (size_t b = 0; b < prompts.size(); ++b) {
    REQUIRE(static_cast<int64_t>(tokens[b].size()) == new_tokens);
    readout::Sequence text = prompts[b];
    text.insert(text.end(), results[b].ids.begin(), results[b].ids.end());
    at::Tensor afterwards = readout::read_prefixes(model, text, kProbes.suffix, kProbes.request).to(at::kCPU);
    for (const generation::GeneratedToken& token : tokens[b]) {
      at::Tensor expected = afterwards[token.position];
      double cosine = at::cosine_similarity(token.rows.flatten().to(at::kDouble), expected.flatten().to(at::kDouble), 0)
                          .item<double>();
      CHECK_MESSAGE(cosine >= 0.999, name, " row ", b, " token ", token.index, ": cosine ", cosine);
    }
  }
}

// Steps of one case that agree with the reference, up to the first near tie (either id right there).
void check_case(const std::string& where, const Json& reference, const std::vector<generation::GeneratedToken>& tokens) {
  REQUIRE(tokens.size() == reference["generated_ids"].size());
  for (size_t s = 0; s < tokens.size(); ++s) {
    const Json& top = reference["top5"][s];
    const double tolerance = 1e-4 * std::abs(top["logits"][0].get<double>());
    for (size_t i = 0; i < 5; ++i) {
      CHECK_MESSAGE(std::abs(tokens[s].top_logits[i] - top["logits"][i].get<double>()) <= tolerance, where, " step ", s);
    }
    if (top["logits"][0].get<double>() - top["logits"][1].get<double>() < tolerance) return;
    CHECK_MESSAGE(tokens[s].id == reference["generated_ids"][s].get<int32_t>(), where, " step ", s);
  }
}

}  // namespace

TEST_CASE("fp32 generation on the GPU matches transformers' greedy generate for every fixture") {
  for (const char* name : kFixtures) {
    model::TransformerModel model = load_on_gpu(name, at::kFloat);
    const Json reference = read_json_file(fixture(name) + "/generation.json");
    generation::GenerationOptions options;
    options.max_new_tokens = 16;
    options.top_logits = 5;
    options.suppressed_ids = generation::read_stop_ids(fixture(name));
    for (size_t c = 0; c < reference["cases"].size(); ++c) {
      std::vector<generation::GeneratedToken> tokens;
      generation::generate(model, {reference["cases"][c]["prompt_ids"].get<readout::Sequence>()}, options, nullptr,
                           [&](const generation::GeneratedToken& token) {
                             tokens.push_back(token);
                             return true;
                           });
      check_case(fmt::format("{} case {}", name, c), reference["cases"][c], tokens);
    }
  }
}

TEST_CASE("bf16 on the GPU: probe rows read while generating a batch agree with read_prefixes afterwards") {
  for (const char* name : {"gemma3_text", "qwen3_moe", "llama"}) {
    check_rows_while_generating(load_on_gpu(name, at::kBFloat16), name, fixture_prompts(name), 8);
  }
}

TEST_CASE("bf16 on the GPU: a row growing past the short rows' slots reads the same rows as read_prefixes") {
  // A random Gemma 3 checkpoint with heads of 64, which the fused attention takes (the fixtures' heads, 8 to 32, are
  // too small for it), so that its steps move from the per-query kernel to the tiled one.
  TempDir tmp;
  model::RandomCheckpointOptions options;
  options.tokenizer_json = kGemmaModel + "/tokenizer.json";
  model::write_random_checkpoint(tmp.file("gemma3"), options);
  model::TransformerModel model = load_dir_on_gpu(tmp.file("gemma3"), at::kBFloat16);
  const model::ModelConfig& c = model.config();
  const int64_t span = 1 + static_cast<int64_t>(kProbes.suffix.size());
  REQUIRE(model::cached_attention_is_fused(c, model.device(), model.dtype(), span));
  REQUIRE(model::fused::tiled_cached_attention_takes(c.num_heads, c.num_kv_heads, c.head_dim, span));
  // 246 prompt tokens: the steps reach past kCachedAttentionShortSlots (256) slots from the 7th new token on.
  const int64_t prompt_tokens = model::fused::kCachedAttentionShortSlots - 10, new_tokens = 16;
  readout::Sequence prompt;
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % c.vocab_size));
  check_rows_while_generating(model, "random gemma3", {prompt}, new_tokens);
  // The steps' shapes: the short rows' slots, then the whole cache; one graph each.
  readout::IncrementalReader reader(model, &kProbes.request, kProbes.suffix);
  reader.graphs().enable(true);
  REQUIRE(reader.graphs().enabled());
  at::Tensor tokens = reader.start({prompt}, new_tokens).narrow(1, 0, 8).argmax(1);
  for (int64_t step = 0; step < new_tokens; ++step) {
    tokens = reader.step(tokens, at::ones_like(tokens)).final_norm.narrow(1, 0, 8).argmax(1);
  }
  CHECK(reader.graphs().captures() == 2);
}

TEST_CASE("decode steps replayed as CUDA graphs give bitwise the eager steps' final norms and probe rows (fp32)") {
  // 70 steps cross a boundary of the cache's visible slots (a new graph); gemma3_text and gemma2 have sliding windows.
  for (const char* name : {"llama", "gemma3_text", "gemma2"}) {
    model::TransformerModel model = load_on_gpu(name, at::kFloat);
    REQUIRE(readout::StepGraphs::supported(model));
    const std::vector<readout::Sequence> prompts = fixture_prompts(name);
    const readout::Request request{Site::kResidPost, Position::kLast, {1, 3}};
    auto run = [&](bool graphs) {
      readout::IncrementalReader reader(model, &request, {5, 6, 7});
      reader.graphs().enable(graphs);
      std::vector<at::Tensor> outputs{reader.start(prompts, 70)};
      at::Tensor tokens = outputs.back().narrow(1, 0, 8).argmax(1);  // any tokens, the same for both runs
      for (int step = 0; step < 70; ++step) {
        readout::IncrementalReader::Step s = reader.step(tokens, at::ones_like(tokens));
        outputs.push_back(s.final_norm);
        outputs.push_back(s.rows);
        tokens = s.final_norm.narrow(1, 0, 8).argmax(1);
      }
      // Each range of visible slots: one eager step, then a capture replayed for every step after (the last range
      // may have had no step after its first).
      const int64_t replays = reader.graphs().replays(), captures = reader.graphs().captures();
      if (graphs) {
        CHECK(captures >= 2);
        CHECK((replays == 70 - captures || replays == 70 - captures - 1));
      } else {
        CHECK(replays == 0);
      }
      return outputs;
    };
    std::vector<at::Tensor> eager = run(false), replayed = run(true);
    for (size_t i = 0; i < eager.size(); ++i) CHECK_MESSAGE(at::equal(eager[i], replayed[i]), name, " output ", i);
  }
}

TEST_CASE("on the GPU three prompts joining (a pass of 16 rows, the last copied) give each one's rows alone (fp32)") {
  model::TransformerModel model = load_on_gpu("llama", at::kFloat);
  const std::vector<readout::Sequence> prompts = fixture_prompts("llama");
  REQUIRE(prompts.size() == 3);
  const readout::Request request{Site::kResidPost, Position::kLast, {1, 3}};
  readout::IncrementalReader together(model, &request, {5, 6, 7});
  at::Tensor joined = together.join(prompts, 4, nullptr);
  REQUIRE(together.rows() == 3);
  at::Tensor tokens = joined.narrow(1, 0, 8).argmax(1);
  readout::IncrementalReader::Step step = together.step(tokens, at::ones_like(tokens));
  for (int64_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    readout::IncrementalReader alone(model, &request, {5, 6, 7});
    at::Tensor own = alone.join({prompts[static_cast<size_t>(i)]}, 4, nullptr);
    CHECK(at::allclose(joined[i], own[0], 1e-4, 1e-4));
    at::Tensor token = tokens.narrow(0, i, 1);
    readout::IncrementalReader::Step own_step = alone.step(token, at::ones_like(token));
    CHECK(at::allclose(step.final_norm[i], own_step.final_norm[0], 1e-4, 1e-4));
    CHECK(at::allclose(step.rows[i], own_step.rows[0], 1e-4, 1e-4));
  }
}
