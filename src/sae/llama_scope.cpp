// OpenMOSS' Llama Scope: hyperparams.json (d_model, d_sae, hook_point_in/out, act_fn, a scalar jump_relu_threshold,
// dataset_average_activation_norm) + checkpoints/final.safetensors (encoder.weight [d_sae, d_model], encoder.bias,
// decoder.weight [d_model, d_sae], decoder.bias). Read as SAELens reads it: trained on inputs scaled to norm
// sqrt(d_model) on average, so inputs are scaled by s = sqrt(d_model) / the dataset's average input norm (and the
// reconstruction back), the threshold taken times s for every latent, no b_dec subtracted from the input. A
// transcoder (hook_point_out blocks.L.hook_mlp_out, in blocks.L.ln2.hook_normalized) reconstructs on its output's
// scale: divided by sqrt(d_model) / the dataset's average output norm.
#include <cmath>

#include "common/error.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

namespace {

// sqrt(d_model) / the dataset's average norm of the SAE's inputs ("in") or of what it reconstructs ("out").
double norm_scale(const Json& config, const char* which, int64_t d_model, const std::string& path) {
  if (!config.contains("dataset_average_activation_norm") || !config["dataset_average_activation_norm"].is_object()) {
    fail_input("{}: 'dataset_average_activation_norm' must be an object {{\"in\": norm, \"out\": norm}}", path);
  }
  const double norm = config_number(config["dataset_average_activation_norm"], which, path + ": dataset_average_activation_norm");
  if (!(norm > 0) || !std::isfinite(norm)) {
    fail_input("{}: dataset_average_activation_norm.{} is {}, expected a positive number", path, which, norm);
  }
  return std::sqrt(static_cast<double>(d_model)) / norm;
}

}  // namespace

SparseAutoencoder read_llama_scope(const std::string& dir) {
  const std::string config_path = dir + "/hyperparams.json";
  const Json config = read_config(config_path);
  const std::string hook_in = config_string(config, "hook_point_in", config_path);
  const std::string hook_out = config.contains("hook_point_out") ? config_string(config, "hook_point_out", config_path) : hook_in;
  const std::string act_fn = config.contains("act_fn") ? config_string(config, "act_fn", config_path) : "jumprelu";
  if (act_fn != "jumprelu") fail_input("{}: act_fn '{}' is not read (read: jumprelu)", config_path, act_fn);
  // The published SAEs were trained on dataset-wise normalised inputs, the scaling read below.
  const std::string norm = config.contains("norm_activation") ? config_string(config, "norm_activation", config_path)
                                                              : "dataset-wise";
  if (norm != "dataset-wise") fail_input("{}: norm_activation '{}' is not read (read: dataset-wise)", config_path, norm);
  SparseAutoencoder sae;
  sae.architecture = Architecture::kJumpRelu;
  sae.subtract_decoder_bias = false;
  sae.d_in = config_int(config, "d_model", config_path);
  sae.d_sae = config_int(config, "d_sae", config_path);
  read_input_site(sae, hook_in, config_path);
  sae.scaling = InputScaling::kConstant;
  sae.input_scale = norm_scale(config, "in", sae.d_in, config_path);
  if (hook_out != hook_in) {  // a transcoder (Llama Scope's TC): its reconstruction on the output's scale
    read_output_site(sae, hook_out, config_path);
    sae.d_out = sae.d_in;
    sae.output_scale = norm_scale(config, "out", sae.d_in, config_path);
  }

  const safetensors::File file(dir + "/checkpoints/final.safetensors");
  const int64_t d_in = sae.d_in, d_sae = sae.d_sae;
  sae.w_enc = read_tensor(file, "encoder.weight", {d_sae, d_in}).t().contiguous();
  sae.b_enc = read_tensor(file, "encoder.bias", {d_sae});
  sae.w_dec = read_tensor(file, "decoder.weight", {d_in, d_sae}).t().contiguous();
  sae.b_dec = read_tensor(file, "decoder.bias", {d_in});
  sae.threshold = at::full({d_sae}, config_number(config, "jump_relu_threshold", config_path) * sae.input_scale);
  return sae;
}

}  // namespace probekit::sae
