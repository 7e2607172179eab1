#include "model/random_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>
#include <list>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "common/json.h"
#include "io/safetensors.h"
#include "model/gemma3_chat_template.h"
#include "tokenizer/tokenizer.h"

namespace probekit::model {

namespace {

// The ids of Gemma's special tokens in `tok`, which the checkpoint's config and tokenizer_config name; a tokenizer
// without them is refused, as its ids would be another model's.
std::map<std::string, int32_t> gemma_special_tokens(const tokenizer::Tokenizer& tok, const std::string& path) {
  std::map<std::string, int32_t> ids;
  std::string missing;
  for (const char* token : {"<bos>", "<eos>", "<pad>", "<unk>"}) {
    if (std::optional<int32_t> id = tok.token_to_id(token)) {
      ids.emplace(token, *id);
    } else {
      missing += (missing.empty() ? "" : ", ") + std::string(token);
    }
  }
  if (!missing.empty()) {
    fail_input("{}: the tokenizer has no {}: a Gemma 3 checkpoint needs Gemma's special tokens (<bos>, <eos>, <pad>, "
               "<unk>); give a Gemma tokenizer.json",
               path, missing);
  }
  return ids;
}

}  // namespace

void write_random_checkpoint(const std::string& dir, const RandomCheckpointOptions& o) {
  if (o.hidden_size <= 0 || o.layers <= 0 || o.heads <= 0 || o.kv_heads <= 0 || o.heads % o.kv_heads != 0 ||
      o.head_dim <= 0 || o.intermediate_size <= 0) {
    fail_usage("random checkpoint: dimensions must be positive and heads a multiple of kv_heads");
  }
  // Every tool would refuse the checkpoint: rotary rotates pairs of dimensions.
  if (o.head_dim % 2 != 0) fail_usage("random checkpoint: --head-dim {} must be even (rotary turns pairs of dimensions)", o.head_dim);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(o.tokenizer_json);
  auto vocab = static_cast<int64_t>(tok.vocab_size());
  const std::map<std::string, int32_t> specials = gemma_special_tokens(tok, o.tokenizer_json);
  StagedDirectory output(dir, o.overwrite, {o.tokenizer_json});

  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::list<at::Tensor> storage;  // keeps tensors alive until they are written
  std::vector<safetensors::TensorData> tensors;
  // Weights scaled by 1/sqrt(fan_in) keep the residual stream's scale steady through the layers; norms get
  // (1 + w) with small w, as trained Gemma checkpoints have.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double std) {
    at::Tensor t = at::normal(0.0, std, shape, generator, at::TensorOptions().dtype(at::kFloat));
    storage.push_back(t.to(at::kBFloat16).contiguous());
    tensors.push_back({name, safetensors::DType::kBF16, shape, storage.back().data_ptr(),
                       static_cast<size_t>(storage.back().nbytes())});
  };
  const int64_t h = o.hidden_size, q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim, inner = o.intermediate_size;
  const double projection = 1.0 / std::sqrt(static_cast<double>(h));
  add("model.embed_tokens.weight", {vocab, h}, 1.0 / std::sqrt(static_cast<double>(h)));
  for (int64_t i = 0; i < o.layers; ++i) {
    std::string p = fmt::format("model.layers.{}.", i);
    for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                             "post_feedforward_layernorm"}) {
      add(p + norm + ".weight", {h}, 0.1);
    }
    add(p + "self_attn.q_proj.weight", {q, h}, projection);
    add(p + "self_attn.k_proj.weight", {kv, h}, projection);
    add(p + "self_attn.v_proj.weight", {kv, h}, projection);
    add(p + "self_attn.o_proj.weight", {h, q}, 1.0 / std::sqrt(static_cast<double>(q)));
    add(p + "self_attn.q_norm.weight", {o.head_dim}, 0.1);
    add(p + "self_attn.k_norm.weight", {o.head_dim}, 0.1);
    add(p + "mlp.gate_proj.weight", {inner, h}, projection);
    add(p + "mlp.up_proj.weight", {inner, h}, projection);
    add(p + "mlp.down_proj.weight", {h, inner}, 1.0 / std::sqrt(static_cast<double>(inner)));
  }
  add("model.norm.weight", {h}, 0.1);
  safetensors::write_file(output.path() + "/model.safetensors", tensors, {{"format", "pt"}});

  Json config = {{"architectures", {"Gemma3ForCausalLM"}},
                 {"model_type", "gemma3_text"},
                 {"vocab_size", vocab},
                 {"hidden_size", h},
                 {"intermediate_size", inner},
                 {"num_hidden_layers", o.layers},
                 {"num_attention_heads", o.heads},
                 {"num_key_value_heads", o.kv_heads},
                 {"head_dim", o.head_dim},
                 {"hidden_activation", "gelu_pytorch_tanh"},
                 {"max_position_embeddings", 32768},
                 {"rms_norm_eps", 1e-6},
                 {"query_pre_attn_scalar", o.head_dim},
                 {"sliding_window", o.sliding_window},
                 {"sliding_window_pattern", 6},
                 {"rope_theta", 1000000.0},
                 {"rope_local_base_freq", 10000.0},
                 {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}},
                 {"attn_logit_softcapping", nullptr},
                 {"final_logit_softcapping", nullptr},
                 {"tie_word_embeddings", true},
                 {"torch_dtype", "bfloat16"},
                 {"bos_token_id", specials.at("<bos>")},
                 {"eos_token_id", specials.at("<eos>")},
                 {"pad_token_id", specials.at("<pad>")},
                 {"probekit_random_weights", true}};
  write_json_file(output.path() + "/config.json", config);
  write_file_atomic(output.path() + "/tokenizer.json", read_file(o.tokenizer_json));
  write_file_atomic(output.path() + "/chat_template.jinja", kGemma3ChatTemplate);
  write_json_file(output.path() + "/tokenizer_config.json", Json{{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"pad_token", "<pad>"},
                                                      {"unk_token", "<unk>"}, {"tokenizer_class", "GemmaTokenizer"}});
  output.commit();
}

}  // namespace probekit::model
