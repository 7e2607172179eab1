// SAELens' layout: cfg.json + sae_weights.safetensors (W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_enc, b_dec; the
// architecture's own tensors), the hook in metadata.hook_name (older configs: a top-level hook_name). Transcoders
// (architecture *_transcoder) add d_out, metadata.hook_name_out and, with a skip connection, W_skip [d_out, d_in];
// they subtract nothing from their input and decode to z W_dec + b_dec (+ x W_skip^T).
#include <map>

#include "common/error.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

namespace {

// SAELens' architecture names: the SAEs' and the transcoders' ("jumprelu_skip_transcoder": JumpReLU, with W_skip).
struct ArchitectureName {
  Architecture architecture;
  bool transcoder = false, skip = false;
};

ArchitectureName architecture_of(const std::string& name, const std::string& path) {
  static const std::map<std::string, ArchitectureName> names = {
      {"standard", {Architecture::kStandard}},
      {"topk", {Architecture::kTopK}},
      // BatchTopK is saved for inference as a JumpReLU with the threshold it learned.
      {"batchtopk", {Architecture::kJumpRelu}},
      {"jumprelu", {Architecture::kJumpRelu}},
      {"gated", {Architecture::kGated}},
      {"transcoder", {Architecture::kStandard, true}},
      {"skip_transcoder", {Architecture::kStandard, true, true}},
      {"jumprelu_transcoder", {Architecture::kJumpRelu, true}},
      {"jumprelu_skip_transcoder", {Architecture::kJumpRelu, true, true}},
  };
  auto found = names.find(name);
  if (found == names.end()) {
    fail_input("{}: architecture '{}' is not read (read: standard, topk, batchtopk, jumprelu, gated, transcoder, "
               "skip_transcoder, jumprelu_transcoder, jumprelu_skip_transcoder)", path, name);
  }
  return found->second;
}

// A hook field of the config: in metadata, or at the top level in older configs.
std::string hook_field(const Json& config, const std::string& field, const std::string& path) {
  const Json& metadata = config.contains("metadata") && config["metadata"].contains(field) ? config["metadata"] : config;
  // Before SAELens 6.0 the input's hook was also called hook_point.
  if (field == "hook_name" && !metadata.contains(field)) {
    if (metadata.contains("hook_point")) return config_string(metadata, "hook_point", path);
    fail_input("{}: missing 'metadata.hook_name' (or, in configs before SAELens 6.0, a top-level 'hook_name' or "
               "'hook_point')",
               path);
  }
  return config_string(metadata, field, path);
}

InputScaling scaling_of(const Json& config, const std::string& path) {
  const std::string name = json_value<std::string>(config, "normalize_activations", "none", path);
  if (name == "none") return InputScaling::kNone;
  if (name == "constant_norm_rescale") return InputScaling::kConstantNormRescale;
  // SAELens folds expected_average_only_in's factor into the weights when it loads for inference; files saved for
  // inference hold that folded form.
  if (name == "expected_average_only_in") return InputScaling::kNone;
  fail_input("{}: normalize_activations '{}' is not read (read: none, constant_norm_rescale, expected_average_only_in)",
             path, name);
}

// The activation: SAELens before 6.0 saved a TopK SAE as architecture "standard" with activation_fn_str "topk" and
// its k in activation_fn_kwargs (6.0 reads it so); both names of the field, and k in either place, are read.
void read_activation(const Json& config, SparseAutoencoder& sae, const std::string& path) {
  const char* field = config.contains("activation_fn_str") ? "activation_fn_str" : "activation_fn";
  const std::string activation =
      config.contains(field) && !config[field].is_null() ? config_string(config, field, path) : "relu";
  if (activation == "topk" && sae.architecture == Architecture::kStandard) sae.architecture = Architecture::kTopK;
  if (activation != "relu" && !(activation == "topk" && sae.architecture == Architecture::kTopK)) {
    fail_input("{}: '{}' is '{}' with architecture '{}', which is not read (read: relu, and topk with standard or topk)",
               path, field, activation, architecture_name(sae.architecture));
  }
  if (sae.architecture != Architecture::kTopK) return;
  const bool in_kwargs = !config.contains("k") && config.contains("activation_fn_kwargs") &&
                         config["activation_fn_kwargs"].is_object() && config["activation_fn_kwargs"].contains("k");
  sae.k = in_kwargs ? config_int(config["activation_fn_kwargs"], "k", path + " activation_fn_kwargs")
                    : config_int(config, "k", path);
}

// Training-time scalings that files saved for inference fold into their weights: a file that still holds one is
// refused rather than read without it.
void refuse_unfolded_scalings(const Json& config, const std::string& path) {
  for (const char* field : {"finetuning_scaling_factor", "rescale_acts_by_decoder_norm"}) {
    if (json_value<bool>(config, field, false, path)) {
      fail_input("{}: '{}' is true: a training checkpoint whose scaling is not folded into its weights is not read "
                 "(save the SAE for inference first)", path, field);
    }
  }
}

}  // namespace

SparseAutoencoder read_saelens(const std::string& dir) {
  const std::string config_path = dir + "/cfg.json", weights_path = dir + "/sae_weights.safetensors";
  const Json config = read_config(config_path);
  // Configs older than SAELens 1.0 name no architecture: SAELens reads them as standard.
  const std::string architecture_name = json_value<std::string>(config, "architecture", "standard", config_path);
  const ArchitectureName architecture = architecture_of(architecture_name, config_path);
  SparseAutoencoder sae;
  sae.architecture = architecture.architecture;
  sae.d_in = config_int(config, "d_in", config_path);
  sae.d_sae = config_int(config, "d_sae", config_path);
  read_activation(config, sae, config_path);
  refuse_unfolded_scalings(config, config_path);
  sae.subtract_decoder_bias = json_value<bool>(config, "apply_b_dec_to_input", !architecture.transcoder, config_path);
  sae.scaling = scaling_of(config, config_path);
  read_input_site(sae, hook_field(config, "hook_name", config_path), config_path);
  if (architecture.transcoder) {
    sae.d_out = config_int(config, "d_out", config_path);
    read_output_site(sae, hook_field(config, "hook_name_out", config_path), config_path);
  } else if (config.contains("d_out")) {
    fail_input("{}: 'd_out' is a transcoder's, but the architecture '{}' is an SAE's", config_path, architecture_name);
  }

  const safetensors::File file(weights_path);
  const int64_t d_in = sae.d_in, d_sae = sae.d_sae, d_out = architecture.transcoder ? sae.d_out : sae.d_in;
  sae.w_enc = read_tensor(file, "W_enc", {d_in, d_sae});
  sae.w_dec = read_tensor(file, "W_dec", {d_sae, d_out});
  sae.b_dec = read_tensor(file, "b_dec", {d_out});
  if (sae.architecture == Architecture::kGated) {
    sae.b_gate = read_tensor(file, "b_gate", {d_sae});
    sae.r_mag = read_tensor(file, "r_mag", {d_sae});
    sae.b_mag = read_tensor(file, "b_mag", {d_sae});
  } else {
    sae.b_enc = read_tensor(file, "b_enc", {d_sae});
  }
  if (sae.architecture == Architecture::kJumpRelu) sae.threshold = read_tensor(file, "threshold", {d_sae});
  // SAELens adds x W_skip^T: W_skip is [d_out, d_in].
  if (architecture.skip) sae.w_skip = read_tensor(file, "W_skip", {d_out, d_in}).t().contiguous();
  return sae;
}

}  // namespace probekit::sae
