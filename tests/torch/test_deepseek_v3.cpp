// DeepSeek V3 beyond its reference fixtures (test_model_reference): the routing by hand, the latent generation cache
// (what it holds, cached steps against full passes, its bytes per token), queries without a bottleneck
// (q_lora_rank null), the published config layouts and a multi-token-prediction layer that is never read.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "common/files.h"
#include "common/json.h"
#include "io/safetensors.h"
#include "model/routed_experts.h"
#include "model/transformer.h"
#include "readout/incremental.h"
#include "tensor_files.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

const std::string kDeepseek = fixture_model("deepseek_v3");

double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  return (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>() /
         expected.abs().max().item<double>();
}

// Routes one token whose router logits are `logits` (an identity router) among 6 experts in 3 groups of 2, the
// best 2 groups kept, top 2, renormalised and scaled by 2.5.
model::Routing route_by_hand(const std::vector<float>& logits, const std::vector<float>& bias) {
  model::RoutedExperts w;
  w.router = at::eye(6, at::kFloat);
  w.score_correction_bias = at::tensor(bias);
  model::RoutedExpertsSpec spec;
  spec.scoring = model::RouterScoring::kSigmoidGroupedTopK;
  spec.experts = 6;
  spec.top_k = 2;
  spec.groups = 3;
  spec.top_groups = 2;
  spec.normalize_top_k = true;
  spec.routed_scaling_factor = 2.5;
  return model::route_tokens(at::tensor(logits).unsqueeze(0), w, spec);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Every tensor of the deepseek_v3 fixture by name.
std::map<std::string, at::Tensor> fixture_tensors() {
  safetensors::File file(kDeepseek + "/model.safetensors");
  std::map<std::string, at::Tensor> tensors;
  for (const safetensors::TensorInfo& info : file.tensors()) tensors[info.name] = read_tensor(file, info);
  return tensors;
}

// The fixture's tokenizer with `config` and `tensors` (fp32) in `dir`.
void write_checkpoint(const std::string& dir, const Json& config, const std::map<std::string, at::Tensor>& tensors) {
  copy_dir(kDeepseek, dir);
  write_json_file(dir + "/config.json", config);
  probekit::testing::write_fp32_tensors(dir + "/model.safetensors", {tensors.begin(), tensors.end()});
}

// Each decoder layer's output [L, T, hidden] for `ids`.
at::Tensor layer_outputs(const model::TransformerModel& m, const std::vector<int64_t>& ids) {
  std::vector<at::Tensor> layers;
  model::TensorHook hook = [&](Site site, int64_t, const at::Tensor& t) {
    if (site == Site::kResidPost) layers.push_back(t[0]);
  };
  model::ForwardPass pass;
  pass.input_ids = at::tensor(ids, at::kLong).unsqueeze(0);
  pass.hook = &hook;
  m.forward(pass);
  return at::stack(layers);
}

// Greedy steps after `prompt` through generation's cache (latent attention's absorbed form), each step's logits
// against a full pass over the text so far (expanded form), both with `writes`; returns the ids generated.
std::vector<int64_t> check_cached_steps(const model::TransformerModel& m, const std::vector<int64_t>& prompt,
                                        const model::StreamWrites* writes) {
  readout::IncrementalReader reader(m, nullptr, {}, writes);
  at::Tensor final_norm = reader.start({readout::Sequence(prompt.begin(), prompt.end())}, 8);
  std::vector<int64_t> text = prompt;
  double largest = 0.0;
  for (int step = 0; step < 8; ++step) {
    model::ForwardPass full;
    full.input_ids = at::tensor(text, at::kLong).unsqueeze(0);
    full.final_norm = true;
    full.writes = writes;
    const at::Tensor expected = m.logits(m.forward(full)[0][-1]), cached = m.logits(final_norm[0]);
    const double error = relative_error(cached, expected);
    largest = std::max(largest, error);
    CHECK_MESSAGE(error <= 1e-4, "step ", step);
    const at::Tensor next = expected.argmax().view({1});
    CHECK(cached.argmax().item<int64_t>() == next.item<int64_t>());
    text.push_back(next.item<int64_t>());
    final_norm = reader.step(next, at::ones({1}, at::kLong)).final_norm;
  }
  MESSAGE(std::string(writes != nullptr ? "steered " : "") << "cached steps against full passes: logits' max relative "
                                                              << "difference " << largest);
  return std::vector<int64_t>(text.begin() + static_cast<int64_t>(prompt.size()), text.end());
}

std::vector<int64_t> first_prompt() {
  return read_json_file(kDeepseek + "/generation.json")["cases"][0]["prompt_ids"].get<std::vector<int64_t>>();
}

}  // namespace

TEST_CASE("DeepSeek V3 routing by hand: groups by their two best biased scores, dropped experts at 0.0, unbiased weights") {
  // Sigmoid scores s = (0.953, 0.047, 0.881, 0.924, 0.007, 0.943), no bias. Groups {0, 1}, {2, 3}, {4, 5} score
  // 1.000, 1.805 and 0.949: the last is dropped, so expert 5 (0.943) loses to expert 3 (0.924). Weights: the
  // chosen scores renormalised, times 2.5.
  model::Routing plain = route_by_hand({3, -3, 2, 2.5, -5, 2.8}, std::vector<float>(6, 0.0f));
  CHECK(plain.experts[0][0].item<int64_t>() == 0);
  CHECK(plain.experts[0][1].item<int64_t>() == 3);
  const double s0 = sigmoid(3), s3 = sigmoid(2.5);
  CHECK(plain.weights[0][0].item<double>() == doctest::Approx(2.5 * s0 / (s0 + s3)).epsilon(1e-6));
  CHECK(plain.weights[0][1].item<double>() == doctest::Approx(2.5 * s3 / (s3 + s0)).epsilon(1e-6));
  CHECK(plain.logits[0][5].item<double>() == doctest::Approx(2.8));
  // Biased scores (-0.1, -0.2, -0.3, -0.4, -1.27, -1.73): group {4, 5} is dropped, and its experts, set to 0.0 as
  // transformers' masked_fill does (not -inf), beat every kept one. Their weights are their unbiased scores.
  model::Routing dropped = route_by_hand({0, 0, 0, 0, 1, -1}, {-0.6f, -0.7f, -0.8f, -0.9f, -2.0f, -2.0f});
  std::map<int64_t, double> chosen;
  for (int64_t j = 0; j < 2; ++j) chosen[dropped.experts[0][j].item<int64_t>()] = dropped.weights[0][j].item<double>();
  REQUIRE(chosen.count(4) == 1);
  REQUIRE(chosen.count(5) == 1);
  CHECK(chosen[4] == doctest::Approx(2.5 * sigmoid(1) / (sigmoid(1) + sigmoid(-1))).epsilon(1e-6));
  CHECK(chosen[5] == doctest::Approx(2.5 * sigmoid(-1) / (sigmoid(1) + sigmoid(-1))).epsilon(1e-6));
}

TEST_CASE("the latent cache: (kv_lora_rank + qk_rope_head_dim) values per token per layer, steps equal full passes, steered too") {
  model::LoadOptions options;
  options.lm_head = true;
  const model::TransformerModel m = model::TransformerModel::load(kDeepseek, options);
  const model::ModelConfig& c = m.config();
  const std::vector<int64_t> prompt = first_prompt();
  const auto tokens = static_cast<int64_t>(prompt.size());
  // A prompt's pass writes, at its positions, what a full pass records: each token's latent (after
  // kv_a_layernorm, kv_lora_rank 16) and its roped rope key (qk_rope_head_dim 8), nothing expanded per head.
  model::KvCache recorded, cache = m.empty_cache(1, tokens + 4);
  model::ForwardPass pass;
  pass.input_ids = at::tensor(prompt, at::kLong).unsqueeze(0);
  pass.record = &recorded;
  m.forward(pass);
  pass.record = nullptr;
  pass.cache = &cache;
  pass.cache_visible = tokens;
  m.forward(pass);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    CAPTURE(layer);
    const at::Tensor& latents = cache.keys[static_cast<size_t>(layer)];
    const at::Tensor& rope_keys = cache.values[static_cast<size_t>(layer)];
    CHECK(latents.sizes() == at::IntArrayRef{1, 1, tokens + 4, 16});
    CHECK(rope_keys.sizes() == at::IntArrayRef{1, 1, tokens + 4, 8});
    CHECK(latents.size(3) + rope_keys.size(3) == c.latent_attention.kv_lora_rank + c.latent_attention.rope_head_dim);
    CHECK(at::equal(latents.narrow(2, 0, tokens), recorded.keys[static_cast<size_t>(layer)]));
    CHECK(at::equal(rope_keys.narrow(2, 0, tokens), recorded.values[static_cast<size_t>(layer)]));
    CHECK(model::layer_cache_bytes(c, layer, 1, 1, 4) == 24 * 4);
  }
  // Greedy steps through the cache (the absorbed form) against a full pass over the whole text at each step, plain
  // and steered (a vector added to layer 1's output, a direction ablated from layer 2's) alike.
  const std::vector<int64_t> plain = check_cached_steps(m, prompt, nullptr);
  model::StreamWrites writes;
  const at::Tensor direction = at::sin(at::arange(64, at::kFloat) * 0.7) + 0.2;
  writes.add(Site::kResidPost, 1, direction * 4.0);
  writes.ablate(Site::kResidPost, 2, direction / direction.norm());
  CHECK(check_cached_steps(m, prompt, &writes) != plain);
}

TEST_CASE("kv_cache_bytes_per_token: the latent and rope key cached, against keys and values expanded per head") {
  const model::TransformerModel m = model::TransformerModel::load(kDeepseek, {});
  // 4 layers of (16 + 8) fp32 values, against 4 heads of (24 + 16) per layer.
  const model::CacheBytesPerToken fixture = m.kv_cache_bytes_per_token();
  CHECK(fixture.cached == 4 * 24 * 4);
  CHECK(fixture.expanded == 4 * 4 * 40 * 4);
  // DeepSeek V3 as published (DeepseekV3Config's defaults), in bf16: 61 layers of 512 + 64 values, against 128
  // heads of 192 + 128: 71 times less.
  const model::ModelConfig v3 = model::resolve_config(Json{{"model_type", "deepseek_v3"}}, "config.json");
  const model::CacheBytesPerToken published = model::kv_cache_bytes_per_token(v3, 2.0);
  CHECK(published.cached == 61 * 576 * 2);
  CHECK(published.expanded == 61 * 128 * 320 * 2);
  // A plain attention model's cache is what it would be expanded.
  const model::TransformerModel llama = model::TransformerModel::load(fixture_model("llama"), {});
  CHECK(llama.kv_cache_bytes_per_token().cached == llama.kv_cache_bytes_per_token().expanded);
}

// With every input norm 1 and rms_norm_eps 1e-12 a layer's normalized input has an RMS of 1, so q_a_layernorm (its
// weight 1) leaves it as it is (to 5e-7): a bottleneck of q_a_proj = I and q_b_proj = W gives the queries of a
// q_proj = W. The same model in both layouts must give the same hidden states.
TEST_CASE("queries from one q_proj (q_lora_rank null) equal an identity bottleneck") {
  Json config = read_json_file(kDeepseek + "/config.json");
  config["rms_norm_eps"] = 1e-12;
  std::map<std::string, at::Tensor> bottleneck = fixture_tensors(), single = bottleneck;
  const int64_t hidden = 64, q_out = 4 * 24;
  for (int64_t layer = 0; layer < 4; ++layer) {
    const std::string prefix = fmt::format("model.layers.{}.", layer);
    const double frequency = 0.37 + 0.01 * static_cast<double>(layer);
    at::Tensor w = at::sin(at::arange(q_out * hidden, at::kFloat).view({q_out, hidden}) * frequency) * 0.1;
    for (auto* tensors : {&bottleneck, &single}) (*tensors)[prefix + "input_layernorm.weight"] = at::ones({hidden});
    bottleneck[prefix + "self_attn.q_a_proj.weight"] = at::eye(hidden);
    bottleneck[prefix + "self_attn.q_a_layernorm.weight"] = at::ones({hidden});
    bottleneck[prefix + "self_attn.q_b_proj.weight"] = w;
    for (const char* name : {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"}) {
      single.erase(prefix + "self_attn." + name);
    }
    single[prefix + "self_attn.q_proj.weight"] = w;
  }
  TempDir tmp;
  config["q_lora_rank"] = hidden;
  write_checkpoint(tmp.file("bottleneck"), config, bottleneck);
  config["q_lora_rank"] = nullptr;
  write_checkpoint(tmp.file("single"), config, single);
  const model::TransformerModel a = model::TransformerModel::load(tmp.file("bottleneck"), {});
  const model::TransformerModel b = model::TransformerModel::load(tmp.file("single"), {});
  CHECK(b.config().latent_attention.q_lora_rank == 0);
  const double error = relative_error(layer_outputs(b, first_prompt()), layer_outputs(a, first_prompt()));
  MESSAGE("q_proj against the identity bottleneck: max relative difference " << error);
  CHECK(error <= 1e-5);
}

TEST_CASE("published DeepSeek V3 configs: legacy rope_scaling, DeepseekV3Config's defaults, moe_layer_freq refused") {
  const Json fixture = read_json_file(kDeepseek + "/config.json");
  const model::ModelConfig current = model::resolve_config(fixture, "config.json");
  // The layout of the published V3 and Kimi K2 configs: rope_theta beside a rope_scaling of "type" yarn.
  Json legacy = fixture;
  legacy.erase("rope_parameters");
  legacy["rope_theta"] = 10000.0;
  legacy["rope_scaling"] = {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 64},
                            {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  const model::ModelConfig old = model::resolve_config(legacy, "config.json");
  CHECK(old.attention_scale == current.attention_scale);
  // 24^-0.5 * (0.1 ln 8 + 1)^2
  CHECK(current.attention_scale == doctest::Approx(std::pow(0.1 * std::log(8.0) + 1.0, 2) / std::sqrt(24.0)));
  for (size_t i = 0; i < current.layers.size(); ++i) CHECK(old.layers[i].rope == current.layers[i].rope);
  // Absent keys take DeepseekV3Config's defaults: DeepSeek V3 itself.
  const model::ModelConfig v3 = model::resolve_config(Json{{"model_type", "deepseek_v3"}}, "config.json");
  CHECK(v3.hidden_size == 7168);
  CHECK(v3.num_layers == 61);
  CHECK(v3.latent_attention.q_lora_rank == 1536);
  CHECK(v3.latent_attention.kv_lora_rank == 512);
  CHECK(v3.head_dim == 192);
  CHECK(v3.routed_experts.experts == 256);
  CHECK(v3.routed_experts.top_k == 8);
  CHECK(v3.routed_experts.groups == 8);
  CHECK(v3.routed_experts.top_groups == 4);
  CHECK(v3.routed_experts.shared_expert_intermediate_size == 2048);
  CHECK(v3.layers[2].feed_forward == model::FeedForward::kDenseMlp);
  CHECK(v3.layers[3].feed_forward == model::FeedForward::kRoutedExperts);
  Json every_other = fixture;
  every_other["moe_layer_freq"] = 2;
  CHECK_THROWS_WITH_AS(model::resolve_config(every_other, "config.json"),
                       doctest::Contains("config.json: 'moe_layer_freq' is 2; only 1"), std::runtime_error);
  Json uneven = fixture;
  uneven["n_group"] = 3;
  CHECK_THROWS_WITH_AS(model::resolve_config(uneven, "config.json"),
                       doctest::Contains("n_routed_experts (8) must be a multiple of n_group (3)"), std::runtime_error);
}

TEST_CASE("a multi-token-prediction layer after the last (model.layers.N.*) is never read") {
  std::map<std::string, at::Tensor> tensors = fixture_tensors();
  for (const char* name : {"model.layers.4.eh_proj.weight", "model.layers.4.self_attn.q_a_proj.weight"}) {
    tensors[name] = at::full({2, 2}, std::nan(""));
  }
  TempDir tmp;
  write_checkpoint(tmp.path(), read_json_file(kDeepseek + "/config.json"), tensors);
  model::LoadOptions options;
  options.lm_head = true;
  for (const std::string& name : model::tensors_to_read(tmp.path(), options)) {
    CHECK_MESSAGE(name.rfind("model.layers.4.", 0) != 0, name);
  }
  const at::Tensor with = layer_outputs(model::TransformerModel::load(tmp.path(), options), first_prompt());
  CHECK(at::equal(with, layer_outputs(model::TransformerModel::load(kDeepseek, options), first_prompt())));
}

TEST_CASE("inspect_model info describes deepseek_v3: latent attention, grouped sigmoid routing, FP8") {
  for (const char* name : {"deepseek_v3", "deepseek_v3_fp8"}) {
    CommandResult r = run_command(fmt::format("{} info --model {}", tool("inspect_model"), fixture_model(name)));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK_CONTAINS(r.output, "family: deepseek_v3");
    CHECK_CONTAINS(r.output, "layers 0: latent attention (queries through rank 24, keys and values from a 16-wide "
                             "latent, heads of 16 + 8 rope dims, values of 16; cached per token: the latent and one "
                             "rope key), softmax scale 0.2978, rope theta 10000 on 8 dims, yarn x8");
    CHECK_CONTAINS(r.output, "layers 1,2,3: latent attention");
    CHECK_CONTAINS(r.output, "routed experts (top 2 of 8, sigmoid scores with a correction bias, within the best 2 "
                             "of 4 groups, renormalised, scaled by 2.5, plus a shared expert)");
    CHECK_CONTAINS(r.output, std::string("quantization: ") + (name == std::string("deepseek_v3") ? "none" : "fp8 (32x32 blocks"));
  }
}
