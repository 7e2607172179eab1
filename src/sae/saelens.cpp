// SAELens' layout: cfg.json + sae_weights.safetensors (W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_enc, b_dec; the
// architecture's own tensors), the hook in metadata.hook_name (older configs: a top-level hook_name).
#include "common/error.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

namespace {

Architecture architecture_of(const std::string& name, const std::string& path) {
  if (name == "standard") return Architecture::kStandard;
  if (name == "topk") return Architecture::kTopK;
  // BatchTopK is saved for inference as a JumpReLU with the threshold it learned.
  if (name == "jumprelu" || name == "batchtopk") return Architecture::kJumpRelu;
  if (name == "gated") return Architecture::kGated;
  fail_input("{}: architecture '{}' is not read (read: standard, topk, batchtopk, jumprelu, gated)", path, name);
}

InputScaling scaling_of(const Json& config, const std::string& path) {
  const std::string name = config.contains("normalize_activations") && config["normalize_activations"].is_string()
                               ? config["normalize_activations"].get<std::string>()
                               : "none";
  if (name == "none") return InputScaling::kNone;
  if (name == "constant_norm_rescale") return InputScaling::kConstantNormRescale;
  // SAELens folds expected_average_only_in's factor into the weights when it loads for inference; files saved for
  // inference hold that folded form.
  if (name == "expected_average_only_in") return InputScaling::kNone;
  fail_input("{}: normalize_activations '{}' is not read (read: none, constant_norm_rescale, expected_average_only_in)",
             path, name);
}

}  // namespace

SparseAutoencoder read_saelens(const std::string& dir) {
  const std::string config_path = dir + "/cfg.json", weights_path = dir + "/sae_weights.safetensors";
  const Json config = read_json_file(config_path);
  if (config.contains("d_out") || config.contains("W_skip")) {
    fail_input("{}: a transcoder (d_out): transcoders are not read yet", config_path);
  }
  SparseAutoencoder sae;
  sae.architecture = architecture_of(config_string(config, "architecture", config_path), config_path);
  sae.d_in = config_int(config, "d_in", config_path);
  sae.d_sae = config_int(config, "d_sae", config_path);
  if (sae.architecture == Architecture::kTopK) sae.k = config_int(config, "k", config_path);
  sae.subtract_decoder_bias = !config.contains("apply_b_dec_to_input") || config["apply_b_dec_to_input"].get<bool>();
  sae.scaling = scaling_of(config, config_path);
  const Json& metadata = config.contains("metadata") ? config["metadata"] : config;
  const std::string hook = config_string(metadata.contains("hook_name") ? metadata : config, "hook_name", config_path);
  std::tie(sae.site, sae.layer) = hook_site(hook, config_path);

  const safetensors::File file(weights_path);
  const int64_t d_in = sae.d_in, d_sae = sae.d_sae;
  sae.w_enc = read_tensor(file, "W_enc", {d_in, d_sae});
  sae.w_dec = read_tensor(file, "W_dec", {d_sae, d_in});
  sae.b_dec = read_tensor(file, "b_dec", {d_in});
  if (sae.architecture == Architecture::kGated) {
    sae.b_gate = read_tensor(file, "b_gate", {d_sae});
    sae.r_mag = read_tensor(file, "r_mag", {d_sae});
    sae.b_mag = read_tensor(file, "b_mag", {d_sae});
  } else {
    sae.b_enc = read_tensor(file, "b_enc", {d_sae});
  }
  if (sae.architecture == Architecture::kJumpRelu) sae.threshold = read_tensor(file, "threshold", {d_sae});
  return sae;
}

}  // namespace probekit::sae
