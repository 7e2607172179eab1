// inspect_model: look inside a checkpoint and its tokenizer, and check which device the tools would use.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "chat/conversation.h"
#include "cli/torch/torch_tool.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/outputs.h"
#include "device/torch/gpu_utils.h"
#include "generation/flags.h"
#include "generation/transcript.h"
#include "hub/resolve.h"
#include "io/safetensors.h"
#include "loading/model_loading.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "steering/steering_flags.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

std::string rope_summary(const model::RopeSpec& rope, bool learned_positions) {
  switch (rope.type) {
    case model::RopeType::kNone: return learned_positions ? "learned positions" : "no position embedding (NoPE)";
    case model::RopeType::kDefault: return fmt::format("rope theta {:g} on {} dims", rope.theta, rope.rotary_dim);
    case model::RopeType::kLinear:
      return fmt::format("rope theta {:g} on {} dims, linear scaling x{:g}", rope.theta, rope.rotary_dim, rope.factor);
    case model::RopeType::kLlama3:
      return fmt::format("rope theta {:g} on {} dims, llama3 scaling x{:g}", rope.theta, rope.rotary_dim, rope.factor);
    case model::RopeType::kLongRope:
      return fmt::format("rope theta {:g} on {} dims, longrope (long factors beyond {} tokens, attention factor {:g})",
                         rope.theta, rope.rotary_dim, rope.original_max_position_embeddings, rope.attention_factor);
    case model::RopeType::kYarn:
      return fmt::format("rope theta {:g} on {} dims, yarn x{:g} (from {} tokens, attention factor {:g})", rope.theta,
                         rope.rotary_dim, rope.factor, rope.original_max_position_embeddings, rope.attention_factor);
    case model::RopeType::kProportional:
      return fmt::format("rope theta {:g} on {} dims, proportional ({:g} of the frequencies turn)", rope.theta,
                         rope.rotary_dim, rope.rotated_fraction);
  }
  return "?";
}

// A layer's token mixer: attention with its window and rope, latent attention with its ranks and rope, or a Gated
// DeltaNet with its heads.
std::string mixer_summary(const model::ModelConfig& c, size_t i) {
  const model::LayerSpec& layer = c.layers[i];
  if (layer.mixer == model::Mixer::kGatedDeltaNet) {
    const model::LinearAttentionSpec& s = c.linear_attention;
    return fmt::format("Gated DeltaNet ({} key heads of {}, {} value heads of {}, convolution over {} tokens)",
                       s.key_heads, s.key_head_dim, s.value_heads, s.value_head_dim, s.conv_kernel);
  }
  if (layer.mixer == model::Mixer::kLatentAttention) {
    const model::LatentAttentionSpec& s = c.latent_attention;
    return fmt::format("latent attention (queries {}, keys and values from a {}-wide latent, heads of {} + {} rope "
                       "dims, values of {}; cached per token: the latent and one rope key), softmax scale {:.4g}, {}",
                       s.q_lora_rank > 0 ? fmt::format("through rank {}", s.q_lora_rank) : std::string("from q_proj"),
                       s.kv_lora_rank, s.nope_head_dim, s.rope_head_dim, s.value_head_dim, c.attention_scale,
                       rope_summary(layer.rope, c.features.learned_positions));
  }
  std::string kind = (layer.sliding_window > 0 ? fmt::format("sliding window {}", layer.sliding_window) : "full attention") +
                     (c.features.attention_sinks ? " with sinks" : "") + ", " +
                     rope_summary(layer.rope, c.features.learned_positions);
  return c.features.attention_output_gate ? kind + ", gated output" : kind;
}

std::string routing_summary(const model::RoutedExpertsSpec& moe) {
  std::string scoring;
  if (moe.scoring == model::RouterScoring::kTopKSoftmax) scoring = ", softmax over the top logits";
  if (moe.scoring == model::RouterScoring::kSigmoidGroupedTopK) {
    scoring = fmt::format(", sigmoid scores with a correction bias, within the best {} of {} groups", moe.top_groups,
                          moe.groups);
  }
  return fmt::format("routed experts (top {} of {}{}{}{}{})", moe.top_k, moe.experts, scoring,
                     moe.normalize_top_k ? ", renormalised" : "",
                     moe.routed_scaling_factor != 1.0 ? fmt::format(", scaled by {:g}", moe.routed_scaling_factor) : "",
                     moe.shared_expert_intermediate_size > 0 ? ", plus a shared expert" : "");
}

void print_info(const std::string& dir, bool json) {
  model::ModelConfig c = model::load_config(dir);
  model::Checkpoint checkpoint = model::Checkpoint::open(dir, c.quantization);
  std::string quantization = c.quantization.method.empty() ? "none" : c.quantization.method + " (dequantized on load)";
  if (c.quantization.method == "mxfp4") quantization = "mxfp4 (experts kept packed on CUDA devices, dequantized on load elsewhere)";
  if (!c.quantization.block.empty()) {
    quantization = fmt::format("{} ({} blocks; projections kept packed on CUDA devices, routed experts and elsewhere dequantized on load)", c.quantization.method, fmt::join(c.quantization.block, "x"));
  }
  // Layers that share attention settings are listed together: "0-4, 6-10: sliding window 1024, rope ...".
  std::map<std::string, std::vector<int64_t>> layer_kinds;
  const model::RoutedExpertsSpec& moe = c.routed_experts;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const auto& layer = c.layers[i];
    std::string kind = mixer_summary(c, i);
    if (layer.head_dim > 0 || layer.num_kv_heads > 0) {
      kind += fmt::format(", head dim {}, key/value heads {}", model::layer_head_dim(c, static_cast<int64_t>(i)),
                          model::layer_kv_heads(c, static_cast<int64_t>(i)));
    }
    if (layer.feed_forward == model::FeedForward::kRoutedExperts) kind += ", " + routing_summary(moe);
    layer_kinds[kind].push_back(static_cast<int64_t>(i));
  }
  if (json) {
    Json kinds = Json::object();
    for (const auto& [kind, layers] : layer_kinds) kinds[kind] = layers;
    Json out = {{"model_type", c.model_type},  {"family", c.text_model_type},     {"layers", c.num_layers},
                {"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                {"attention_heads", c.num_heads}, {"key_value_heads", c.num_kv_heads}, {"head_dim", c.head_dim},
                {"vocab_size", c.vocab_size}, {"parameters", checkpoint.parameter_count()},
                {"weights_dtype", checkpoint.dominant_dtype()}, {"activation", model::activation_name(c.features.activation)},
                {"attention", kinds}, {"quantization", quantization}};
    const model::CacheBytesPerToken cache = model::kv_cache_bytes_per_token(c, 2.0);
    out["kv_cache_bytes_per_token_bf16"] = {{"cached", cache.cached}, {"expanded", cache.expanded}};
    if (moe.experts > 0) {
      out["routed_experts"] = {{"experts", moe.experts}, {"top_k", moe.top_k},
                               {"intermediate_size", moe.intermediate_size}, {"layers", model::routed_expert_layers(c)}};
    }
    fmt::print("{}\n", dump_json(out, 2));
    return;
  }
  fmt::print("model: {}\n", dir);
  fmt::print("family: {}{}\n", c.text_model_type, c.model_type != c.text_model_type ? " (text tower of " + c.model_type + ")" : "");
  fmt::print("layers: {}\nhidden size: {}\nintermediate size: {}\n", c.num_layers, c.hidden_size, c.intermediate_size);
  fmt::print("attention heads: {} (key/value heads: {}, head dim: {})\n", c.num_heads, c.num_kv_heads, c.head_dim);
  fmt::print("vocabulary: {}\nactivation: {}\n", c.vocab_size, model::activation_name(c.features.activation));
  auto parameters = static_cast<double>(checkpoint.parameter_count());
  fmt::print("parameters: {} ({})\nweights dtype: {}\n", checkpoint.parameter_count(),
             parameters >= 1e9 ? fmt::format("{:.2f} B", parameters / 1e9) : fmt::format("{:.1f} M", parameters / 1e6),
             checkpoint.dominant_dtype());
  fmt::print("quantization: {}\n", quantization);
  if (c.per_layer_input_size > 0) fmt::print("per-layer inputs: {} per layer\n", c.per_layer_input_size);
  for (const auto& [kind, layers] : layer_kinds) fmt::print("layers {}: {}\n", fmt::join(layers, ","), kind);
  const model::CacheBytesPerToken cache = model::kv_cache_bytes_per_token(c, 2.0);
  fmt::print("generation cache per token in bf16: {:.0f} bytes{}\n", cache.cached,
             cache.expanded != cache.cached ? fmt::format(" (expanded keys and values would take {:.0f})", cache.expanded) : "");
}

void write_hidden(const std::string& dir, const std::string& text, const std::string& output,
                  const std::string& device_request, const std::string& dtype_request,
                  const steering::SteeringSpec& steering) {
  loading::ModelRequest request;
  request.model_dir = dir;
  request.device = device_request;
  request.dtype = dtype_request;
  loading::LoadedModel loaded = loading::load_model(request, model::LoadOptions{});
  const model::TransformerModel& m = *loaded.model;
  const device::ComputeTarget& target = loaded.targets.front();
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(dir);
  std::vector<int32_t> ids = tok.encode(text, true);
  const steering::SteeringVectors vectors = steering::resolve(steering, m.config());
  const model::StreamWrites writes = steering::place(vectors, m);
  readout::HiddenStates states = readout::read_hidden_states(m, ids, &writes);
  // Refused as capture refuses them, rather than written as NaN rows.
  std::vector<int64_t> layers(static_cast<size_t>(states.layers.size(0)));
  for (size_t l = 0; l < layers.size(); ++l) layers[l] = static_cast<int64_t>(l);
  readout::check_finite_rows(states.layers, 0, layers);
  if (!at::isfinite(states.final_norm).all().item<bool>()) {
    fail_input("{}", readout::non_finite_message("the final norm's outputs are"));
  }
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  auto tensor = [](const std::string& name, const at::Tensor& t) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    return safetensors::TensorData{name, safetensors::DType::kF32, shape, t.data_ptr<float>(), static_cast<size_t>(t.nbytes())};
  };
  std::vector<safetensors::TensorData> tensors = {
      {"input_ids", safetensors::DType::kI64, {static_cast<int64_t>(ids64.size())}, ids64.data(), ids64.size() * sizeof(int64_t)},
      tensor("embeddings", states.embeddings), tensor("layers", states.layers), tensor("final_norm", states.final_norm)};
  if (states.router_logits.defined()) tensors.push_back(tensor("router_logits", states.router_logits));
  std::map<std::string, std::string> metadata = {
      {"model", dir}, {"text", text}, {"dtype", device::dtype_name(target.dtype_choice.dtype)}};
  if (!vectors.empty()) metadata["steering"] = vectors.record().dump();
  safetensors::write_file(output, tensors, metadata);
  std::vector<std::string> shapes;
  for (const safetensors::TensorData& t : tensors) shapes.push_back(fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", ")));
  fmt::print("wrote {}: {}\n", output, fmt::join(shapes, ", "));
}

void tokenize(const std::string& path, const std::string& text, const std::string& input, const std::string& output,
              bool add_special_tokens) {
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(path);
  if (!input.empty()) {
    Json texts = read_json_file(input);
    if (!texts.is_array()) fail_input("{}: expected a JSON list of strings", input);
    std::vector<std::string> strings;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].is_string()) fail_input("{}: item {} is not a string", input, i);
      strings.push_back(texts[i].get<std::string>());
    }
    Json ids = tok.encode_batch(strings, add_special_tokens);
    if (output.empty()) {
      fmt::print("{}\n", ids.dump());
    } else {
      write_file_atomic(output, ids.dump() + "\n");
      fmt::print("wrote {} id lists to {}\n", strings.size(), output);
    }
    return;
  }
  std::vector<int32_t> ids = tok.encode(text, add_special_tokens);
  std::vector<std::string> tokens = tok.tokens(ids);
  fmt::print("{} tokens\n", ids.size());
  for (size_t i = 0; i < ids.size(); ++i) fmt::print("{:5}  {:8}  {}\n", i, ids[i], Json(tokens[i]).dump());
}

CLI::App* add_chat_template_command(CLI::App& app, std::string& model_dir, std::string& messages, bool& no_generation_prompt) {
  CLI::App* command = app.add_subcommand(
      "chat-template", "Print a conversation rendered with a checkpoint's chat template: the prompt, nothing else");
  command->add_option("--model", model_dir, "Checkpoint or tokenizer folder (its chat_template.jinja or tokenizer_config.json)")
      ->required();
  command->add_option("--messages", messages, "JSON list of {\"role\", \"content\"} messages, or an object with \"messages\"")
      ->required();
  command->add_flag("--no-generation-prompt", no_generation_prompt,
                    "Leave out the prompt of the model's reply (transformers' add_generation_prompt=False)");
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool(argv, "Inspect a Hugging Face checkpoint, its tokenizer and the compute device");
  tool.app.require_subcommand(1);

  std::string model_dir, device_request = "auto", dtype_request = "auto", text, output, input, tokenizer_path;
  bool json = false, no_special = false, overwrite = false, no_generation_prompt = false;

  CLI::App* info = tool.app.add_subcommand("info", "Family, layers, hidden size, heads, parameter count, weight dtype");
  add_model_options(*info, model_dir, "Checkpoint")->required();
  info->add_flag("--json", json, "Print JSON");

  CLI::App* hidden = tool.app.add_subcommand("hidden", "Write a text's hidden states (every layer) to a safetensors file");
  add_model_options(*hidden, model_dir, "Checkpoint")->required();
  hidden->add_option("--text", text, "Text to run (tokenized with special tokens, as transformers does)")->required();
  hidden->add_option("--output", output,
                     "Output .safetensors: input_ids, embeddings, layers, final_norm (and router_logits for MoE models)")
      ->required();
  hidden->add_flag("--overwrite", overwrite, "Replace an existing --output");
  add_device_options(*hidden, device_request, dtype_request);
  steering::SteeringSpec steering_spec;
  steering::add_steering_flags(*hidden, steering_spec, true);

  CLI::App* generate_cmd =
      tool.app.add_subcommand("generate", "Generate after a text and write the ids and each step's top-5 logits as JSON");
  add_model_options(*generate_cmd, model_dir, "Checkpoint")->required();
  generate_cmd->add_option("--text", text, "Prompt (tokenized with special tokens, as transformers does)")->required();
  generate_cmd->add_option("--output", output, "Output .json in the format of the reference's generation.json")
      ->required();
  generate_cmd->add_flag("--overwrite", overwrite, "Replace an existing --output");
  generation::GenerationFlags generation_flags;
  generation::add_generation_flags(*generate_cmd, generation_flags);
  add_device_options(*generate_cmd, device_request, dtype_request);
  steering::add_steering_flags(*generate_cmd, steering_spec, true);

  CLI::App* tokenize_cmd = tool.app.add_subcommand("tokenize", "Turn texts into token ids with a tokenizer.json");
  tokenize_cmd->add_option("--tokenizer", tokenizer_path, "tokenizer.json or a checkpoint directory")->required();
  auto* text_option = tokenize_cmd->add_option("--text", text, "One text: print its ids and tokens");
  auto* input_option = tokenize_cmd->add_option("--input", input, "JSON list of texts");
  text_option->excludes(input_option);
  tokenize_cmd->add_option("--output", output, "Where --input's ids go (JSON list of id lists; default stdout)");
  tokenize_cmd->add_flag("--overwrite", overwrite, "Replace an existing --output");
  tokenize_cmd->add_flag("--no-special-tokens", no_special, "Do not add BOS and other template tokens");

  CLI::App* chat_cmd = add_chat_template_command(tool.app, model_dir, input, no_generation_prompt);

  CLI::App* device_cmd = tool.app.add_subcommand("device", "Show the device and dtype that --device/--dtype resolve to");
  add_device_options(*device_cmd, device_request, dtype_request);

  return tool.run(argc, argv, [&] {
    const int threads = tool.threads();
    if (info->parsed()) print_info(hub::resolve_model(model_dir).dir, json);
    if (!output.empty()) check_output_file(output, overwrite);
    if (hidden->parsed()) {
      write_hidden(hub::resolve_model(model_dir).dir, text, output, device_request, dtype_request, steering_spec);
    }
    if (generate_cmd->parsed()) {
      std::string dir = hub::resolve_model(model_dir).dir;
      Json transcript = generation::generation_transcript(
          dir, {text}, generation::resolve_generation_flags(generation_flags, dir), device_request, dtype_request,
          steering_spec);
      write_file_atomic(output, dump_json(transcript, 2) + "\n");
      fmt::print("wrote {}: {} new tokens\n", output, transcript["cases"][0]["generated_ids"].size());
    }
    if (tokenize_cmd->parsed()) {
      if (text_option->count() == 0 && input_option->count() == 0) fail_usage("tokenize needs --text or --input");
      tokenize(tokenizer_path, text, input, output, !no_special);
    }
    if (chat_cmd->parsed()) {
      fmt::print("{}", chat::render_conversation(model_dir, chat::read_messages(input), !no_generation_prompt));
    }
    if (device_cmd->parsed()) {
      device::ComputeTarget target = device::select_compute(device_request, dtype_request);
      fmt::print("device: {}\ndtype: {}\nthreads: {}\navailable: {}\n", target.device.str(),
                 device::dtype_name(target.dtype_choice.dtype), threads, device::list_available(target.runtime));
    }
  });
}
