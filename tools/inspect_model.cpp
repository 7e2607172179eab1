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
#include "common/utf8_text.h"
#include "device/torch/gpu_utils.h"
#include "generation/flags.h"
#include "generation/transcript.h"
#include "hub/resolve.h"
#include "io/safetensors.h"
#include "loading/model_loading.h"
#include "model/model_summary.h"
#include "model/transformer.h"
#include "readout/readout.h"
#include "steering/steering_flags.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

void write_hidden(const std::string& dir, const std::string& text, const std::string& output,
                  const std::string& device_request, const std::string& dtype_request,
                  const steering::SteeringSpec& steering) {
  check_output_folder(output);  // before the model loads
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
      {"model", dir}, {"text", to_valid_utf8(text)}, {"dtype", device::dtype_name(target.dtype_choice.dtype)}};
  if (!vectors.empty()) metadata["steering"] = vectors.record().dump();
  safetensors::write_file(output, tensors, metadata);
  std::vector<std::string> shapes;
  for (const safetensors::TensorData& t : tensors) shapes.push_back(fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", ")));
  fmt::print("wrote {}: {}\n", output, fmt::join(shapes, ", "));
}

void tokenize(const std::string& path, const std::string& text, const std::string& input, const std::string& output,
              bool add_special_tokens) {
  if (input.empty() && !output.empty()) fail_usage("tokenize --output takes --input's id lists; --text's ids are printed");
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
  command->add_option("--messages", messages, "JSON list of {\"role\", \"content\"} messages, or an object with \"messages\" (and \"tools\")")
      ->required();
  command->add_flag("--no-generation-prompt", no_generation_prompt,
                    "Leave out the prompt of the model's reply (transformers' add_generation_prompt=False)");
  return command;
}

// The conversation in `input` as the model's chat template renders it: a local folder's, whose template files alone
// are read (a hub name would download the whole checkpoint for them).
void print_chat(const std::string& model, const std::string& input, bool add_generation_prompt) {
  if (!is_directory(model)) fail_input("--model {}: no such folder (chat-template reads a local checkpoint or tokenizer folder)", model);
  fmt::print("{}", chat::render_conversation(model, chat::read_conversation(input), add_generation_prompt));
}

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool("Inspect a Hugging Face checkpoint, its tokenizer and the compute device");
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
    if (info->parsed()) {
      const model::ModelSummary summary = model::summarize_model(hub::resolve_model(model_dir).dir);
      fmt::print("{}", json ? dump_json(summary.to_json(), 2) + "\n" : summary.to_text());
    }
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
      print_chat(model_dir, input, !no_generation_prompt);
    }
    if (device_cmd->parsed()) {
      device::ComputeTarget target = device::select_compute(device_request, dtype_request);
      fmt::print("device: {}\ndtype: {}\nthreads: {}\navailable: {}\n", target.device.str(),
                 device::dtype_name(target.dtype_choice.dtype), threads, device::list_available(target.runtime));
    }
  });
}
