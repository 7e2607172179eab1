// Damaged checkpoints and configs: each gives a clear error naming the file and what is wrong.
#include <doctest/doctest.h>
#include <unistd.h>


#include "common/files.h"
#include "common/json.h"
#include "model/transformer.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {


std::string load_error(const std::string& dir, model::LoadOptions options = {}) {
  try {
    model::TransformerModel::load(dir, options);
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error loading " << dir);
  return "";
}

// The message resolve_config refuses a config with.
std::string resolve_error(const Json& config) {
  try {
    model::resolve_config(config, "config.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected " << config.dump() << " to be refused");
  return "";
}

// A copy of a fixture whose config.json keys are replaced (null removes a key).
std::string with_config(const TempDir& tmp, const std::string& name, const Json& changes) {
  std::string dir = tmp.file(name);
  probekit::testing::copy_dir(fixture_model(name), dir);
  Json config = read_json_file(dir + "/config.json");
  for (auto it = changes.begin(); it != changes.end(); ++it) {
    if (it->is_null()) {
      config.erase(it.key());
    } else {
      config[it.key()] = *it;
    }
  }
  write_json_file(dir + "/config.json", config);
  return dir;
}

}  // namespace

TEST_CASE("unsupported model_type lists the supported ones") {
  TempDir tmp;
  std::string message = load_error(with_config(tmp, "llama", {{"model_type", "mamba"}}));
  CHECK_CONTAINS(message, "unsupported model_type 'mamba'");
  CHECK_CONTAINS(message, "gemma3_text");
  CHECK_CONTAINS(message, "gpt_neox");
}

TEST_CASE("inconsistent configs name the file and the key") {
  TempDir tmp;
  CHECK_CONTAINS(load_error(with_config(tmp, "qwen3", {{"layer_types", {"full_attention"}}})),
                 "'layer_types' has 1 entries for 4 layers");
  TempDir tmp2;
  CHECK_CONTAINS(load_error(with_config(tmp2, "llama", {{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}})),
                 "rope_type 'dynamic', which is not supported");
  TempDir tmp3;
  CHECK_CONTAINS(load_error(with_config(tmp3, "llama", {{"num_key_value_heads", 3}})),
                 "must be a multiple of num_key_value_heads");
  TempDir tmp4;
  CHECK_CONTAINS(load_error(with_config(tmp4, "gemma2", {{"hidden_size", "64"}})), "'hidden_size' must be an integer");
  TempDir tmp5;
  CHECK_CONTAINS(load_error(with_config(tmp5, "gpt2", {{"activation_function", "relu6"}})), "unsupported activation");
  TempDir tmp6;
  CHECK_CONTAINS(load_error(with_config(tmp6, "mistral", {{"model_type", nullptr}})), "no 'model_type' key");
}

TEST_CASE("the new families' keys are checked: expert counts, top k, sparse layers, longrope factors") {
  TempDir tmp;
  CHECK_CONTAINS(load_error(with_config(tmp, "qwen3_moe", {{"num_local_experts", 6}})),
                 "'num_experts' (8) and 'num_local_experts' (6) disagree");
  TempDir tmp2;
  CHECK_CONTAINS(load_error(with_config(tmp2, "mixtral", {{"num_experts_per_tok", 5}})),
                 "num_experts_per_tok 5 must be between 1 and the number of experts, 4");
  TempDir tmp3;
  CHECK_CONTAINS(load_error(with_config(tmp3, "qwen2_moe", {{"mlp_only_layers", {"1"}}})),
                 "'mlp_only_layers' must be a list of integers");
  TempDir tmp4;
  Json rope = read_json_file(fixture_model("phi3_longrope") + "/config.json")["rope_scaling"];
  rope["short_factor"] = {1.0, 1.0};
  CHECK_CONTAINS(load_error(with_config(tmp4, "phi3_longrope", {{"rope_scaling", rope}})),
                 "'short_factor' has 2 entries and 'long_factor' 6, but the rotary dimension 12 has 6 frequencies");
  TempDir tmp5;
  CHECK_CONTAINS(load_error(with_config(tmp5, "qwen3_moe", {{"decoder_sparse_step", 0}})),
                 "'decoder_sparse_step' must be positive");
  // The weights a sparse layer needs are named, with the file.
  TempDir tmp6;
  CHECK_CONTAINS(load_error(with_config(tmp6, "qwen3_moe", {{"mlp_only_layers", Json::array()}})),
                 "missing weight 'model.layers.1.mlp.gate.weight'");
}

TEST_CASE("fuzz regression (fuzz_config): layer counts, widths and the rotary fraction are checked before use") {
  // A negative layer count (found by fuzz_config) sized a vector with 2^64 - 9568 elements; 10^12 layers, a
  // hidden size whose 4x overflowed, and a rotary fraction beyond int64 as a dimension were found by feeding
  // such values to the same target.
  CHECK(resolve_error(Json::parse(R"({"model_type": "gemma3_text", "num_hidden_layers": -9568})")) ==
        "config.json: num_hidden_layers must be positive, got -9568");
  CHECK_CONTAINS(resolve_error(Json::parse(R"({"model_type": "gemma2", "num_hidden_layers": 1000000000000})")),
                 "config.json: implausible model dimensions (layers 1000000000000, hidden 2304, heads 8)");
  CHECK_CONTAINS(
      resolve_error(Json::parse(R"({"model_type": "gpt2", "n_embd": 4611686018427387904, "n_head": 1, "n_layer": 2})")),
      "config.json: implausible model dimensions (layers 2, hidden 4611686018427387904, heads 1)");
  CHECK(resolve_error(Json::parse(
            R"({"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4, "rotary_pct": 1e300})")) ==
        "config.json: the rotary fraction 1e+300 must be in (0, 1]");
}

TEST_CASE("fuzz regression (fuzz_config): a layer's own head_dim is bounded, and its rotary dims lie inside it") {
  // fuzz_config flagged the Gemma 4 fixture: its full layer rotates within its own 512-wide heads (proportional
  // rope, a quarter of the frequencies turning), wider than the model's head_dim (16). The target's check was wrong,
  // not the config; but a layer's own head_dim was not bounded at all, and a negative global_head_dim fell back to
  // the model's head_dim without a word.
  const Json fixture = read_json_file(fixture_model("gemma4_text") + "/config.json");
  const model::ModelConfig config = model::resolve_config(fixture, "config.json");
  CHECK(model::layer_head_dim(config, 5) == 512);
  CHECK(config.layers[5].rope.rotary_dim == 512);
  Json huge = fixture;
  huge["per_layer_config"]["5"]["head_dim"] = int64_t{1} << 40;
  CHECK(resolve_error(huge) == "config.json: layer 5's head_dim 1099511627776 must be between 1 and 4096");
  Json negative = fixture;
  negative.erase("per_layer_config");
  negative["global_head_dim"] = -2;
  CHECK(resolve_error(negative) == "config.json: layer 5's head_dim -2 must be between 1 and 4096");
}

TEST_CASE("quantized files not read are refused naming quant_method, before any weight is read") {
  for (const char* method : {"bitsandbytes", "gptq", "awq", "compressed-tensors"}) {
    TempDir tmp;
    const std::string dir = with_config(tmp, "qwen3", {{"quantization_config", {{"quant_method", method}}}});
    // A weights file that cannot be parsed: the refusal must come before it is opened.
    write_file_atomic(dir + "/model.safetensors", "not a safetensors file");
    const std::string message = load_error(dir);
    CHECK_CONTAINS(message, fmt::format("'quantization_config.quant_method' is '{}'", method));
    CHECK_CONTAINS(message, "quant_method fp8");
  }
  TempDir tmp;
  CHECK_CONTAINS(load_error(with_config(tmp, "qwen3_fp8", {{"quantization_config", {{"quant_method", "fp8"}}}})),
                 "'quantization_config.weight_block_size' is missing");
  TempDir tmp2;
  CHECK_CONTAINS(load_error(with_config(tmp2, "qwen3_fp8", {{"quantization_config", nullptr}})),
                 "is F8_E4M3 but config.json's quantization_config does not say quant_method 'fp8'");
  TempDir tmp3;
  const std::string unsaid = load_error(with_config(tmp3, "gpt_oss_mxfp4", {{"quantization_config", nullptr}}));
  CHECK_CONTAINS(unsaid, "weight 'model.layers.0.mlp.experts.gate_up_proj_blocks' in ");
  CHECK_CONTAINS(unsaid, "is part of an MXFP4 weight but config.json's quantization_config does not say quant_method 'mxfp4'");
}

TEST_CASE("Gemma 4 options the runtime does not implement are refused by name") {
  const std::pair<const char*, Json> options[] = {
      {"num_kv_shared_layers", 2},     {"attention_k_eq_v", true},         {"enable_moe_block", true},
      {"use_double_wide_mlp", true}, {"use_bidirectional_attention", "all"},
  };
  for (const auto& option : options) {
    const auto& key = option.first;
    const auto& value = option.second;
    TempDir tmp;
    CHECK_CONTAINS(load_error(with_config(tmp, "gemma4_text", {{key, value}})), fmt::format("'{}' is", key));
  }
}

TEST_CASE("missing config, weights, shard and tensors") {
  TempDir tmp;
  CHECK_CONTAINS(load_error(tmp.path()), "no config.json");

  std::string no_weights = tmp.file("no_weights");
  probekit::testing::copy_dir(fixture_model("llama"), no_weights);
  remove_tree(no_weights + "/model.safetensors");
  CHECK_CONTAINS(load_error(no_weights), "no model.safetensors or model.safetensors.index.json");

  std::string sharded = tmp.file("sharded");
  probekit::testing::copy_dir(fixture_model("qwen3_sharded"), sharded);
  remove_tree(sharded + "/model-00002-of-00003.safetensors");
  std::string message = load_error(sharded);
  CHECK_CONTAINS(message, "model-00002-of-00003.safetensors listed in the index is missing");

  // A checkpoint of another shape: every weight is there but its shapes disagree with config.json.
  std::string resized = tmp.file("resized");
  probekit::testing::copy_dir(fixture_model("llama"), resized);
  Json config = read_json_file(resized + "/config.json");
  config["intermediate_size"] = 96;
  write_json_file(resized + "/config.json", config);
  message = load_error(resized);
  CHECK_CONTAINS(message, "model.layers.0.mlp.gate_proj.weight");
  CHECK_CONTAINS(message, "has shape [128, 64], expected [96, 64]");

  // Weights of another family: the expected tensor is named with the file it was looked for in.
  std::string renamed = tmp.file("renamed");
  probekit::testing::copy_dir(fixture_model("gpt_neox"), renamed);
  config = read_json_file(renamed + "/config.json");
  config["model_type"] = "gpt2";
  write_json_file(renamed + "/config.json", config);
  message = load_error(renamed);
  CHECK_CONTAINS(message, "missing weight 'wte.weight'");
  CHECK_CONTAINS(message, "model.safetensors");
}

TEST_CASE("a truncated weights file is refused before anything is read") {
  TempDir tmp;
  std::string dir = tmp.file("truncated");
  probekit::testing::copy_dir(fixture_model("gemma"), dir);
  REQUIRE(::truncate((dir + "/model.safetensors").c_str(), static_cast<off_t>(file_size(dir + "/model.safetensors") / 2)) == 0);
  CHECK_CONTAINS(load_error(dir), "file truncated?");
}

TEST_CASE("only the layers a run needs are loaded, and deeper ones are refused") {
  model::LoadOptions options;
  options.last_layer = 1;
  options.final_norm = false;
  model::TransformerModel m = model::TransformerModel::load(fixture_model("qwen2"), options);
  CHECK(m.loaded_layers() == 2);
  CHECK_FALSE(m.has_final_norm());
  model::ForwardPass pass;
  pass.input_ids = at::ones({1, 3}, at::kLong);
  pass.last_layer = 2;
  CHECK_THROWS_WITH(m.forward(pass), doctest::Contains("layer 2 was not loaded"));
  options.last_layer = 4;
  CHECK_CONTAINS(load_error(fixture_model("qwen2"), options), "layer 4 is out of range: the model has 4 layers");
  CHECK_THROWS_WITH(m.check_inputs({1, 2, 100000}), doctest::Contains("outside the model's vocabulary"));
}

TEST_CASE("Gated DeltaNet hybrids: mixers from layer_types or full_attention_interval, linear_* keys checked") {
  // Without layer_types, every full_attention_interval-th layer is full attention (qwen3_next's layer 3 of 4).
  TempDir tmp;
  const model::ModelConfig interval = model::load_config(with_config(tmp, "qwen3_next", {{"layer_types", nullptr}}));
  const model::ModelConfig listed = model::load_config(fixture_model("qwen3_next"));
  for (size_t i = 0; i < listed.layers.size(); ++i) CHECK(interval.layers[i].mixer == listed.layers[i].mixer);
  CHECK(listed.layers[3].mixer == model::Mixer::kAttention);
  TempDir tmp2;
  CHECK_CONTAINS(load_error(with_config(tmp2, "qwen3_next", {{"layer_types", {"linear_attention", "sliding_attention",
                                                                               "full_attention", "full_attention"}}})),
                 "'layer_types' entry 'sliding_attention' is not supported");
  TempDir tmp3;
  CHECK_CONTAINS(load_error(with_config(tmp3, "qwen3_5_text", {{"linear_num_value_heads", 3}})),
                 "linear_num_value_heads (3) must be a multiple of linear_num_key_heads (2)");
  TempDir tmp4;
  CHECK_CONTAINS(load_error(with_config(tmp4, "qwen3_5_text", {{"linear_conv_kernel_dim", 0}})),
                 "'linear_conv_kernel_dim' must be positive");
}
