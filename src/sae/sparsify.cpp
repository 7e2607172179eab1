// EleutherAI's sparsify: <hookpoint>/cfg.json (k, num_latents or expansion_factor) + sae.safetensors
// (encoder.weight [d_sae, d_in], encoder.bias, W_dec [d_sae, d_in], b_dec): the k largest of
// relu((x - b_dec) encoder.weight^T + encoder.bias). The folder's name is the hookpoint ("layers.12").
#include "common/error.h"
#include "common/files.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

SparseAutoencoder read_sparsify(const std::string& dir) {
  const std::string config_path = dir + "/cfg.json";
  const Json config = read_json_file(config_path);
  if (config.contains("skip_connection") && config["skip_connection"].is_boolean() && config["skip_connection"].get<bool>()) {
    fail_input("{}: skip_connection true (a transcoder): transcoders are not read yet", config_path);
  }
  SparseAutoencoder sae;
  sae.architecture = Architecture::kTopK;
  sae.k = config_int(config, "k", config_path);
  std::tie(sae.site, sae.layer) = hook_site(folder_name(dir), config_path);
  const safetensors::File file(dir + "/sae.safetensors");
  const safetensors::TensorInfo* encoder = file.find("encoder.weight");
  if (encoder == nullptr || encoder->shape.size() != 2) fail_input("{}: no 2-D tensor 'encoder.weight'", file.path());
  sae.d_sae = encoder->shape[0];
  sae.d_in = encoder->shape[1];
  if (config.contains("num_latents") && config_int(config, "num_latents", config_path) != 0 &&
      config_int(config, "num_latents", config_path) != sae.d_sae) {
    fail_input("{}: num_latents {} but encoder.weight has {} rows", config_path, config["num_latents"].get<int64_t>(), sae.d_sae);
  }
  sae.w_enc = read_tensor(file, "encoder.weight", {sae.d_sae, sae.d_in}).t().contiguous();
  sae.b_enc = read_tensor(file, "encoder.bias", {sae.d_sae});
  sae.w_dec = read_tensor(file, "W_dec", {sae.d_sae, sae.d_in});
  sae.b_dec = read_tensor(file, "b_dec", {sae.d_in});
  return sae;
}

}  // namespace probekit::sae
