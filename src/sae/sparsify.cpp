// EleutherAI's sparsify: <hookpoint>/cfg.json (k, num_latents or expansion_factor) + sae.safetensors
// (encoder.weight [d_sae, d_in], encoder.bias, W_dec [d_sae, d_in], b_dec): the k largest of
// relu((x - b_dec) encoder.weight^T + encoder.bias). The folder's name is the hookpoint ("layers.12"). A transcoder
// (transcode, at an MLP "layers.12.mlp") encodes the MLP's input without subtracting b_dec and reconstructs the MLP
// module's output, adding x W_skip^T with skip_connection.
#include "common/error.h"
#include "common/files.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

SparseAutoencoder read_sparsify(const std::string& dir) {
  const std::string config_path = dir + "/cfg.json";
  const Json config = read_config(config_path);
  auto flag = [&](const char* field) { return json_value<bool>(config, field, false, config_path); };
  SparseAutoencoder sae;
  sae.architecture = Architecture::kTopK;
  if (config.contains("activation") && config_string(config, "activation", config_path) != "topk") {
    fail_input("{}: activation '{}' is not read (read: topk)", config_path, config["activation"].get<std::string>());
  }
  sae.k = config_int(config, "k", config_path);
  // The hookpoint is a module: an attention or MLP block's output is its own, before any post-norm.
  read_input_site(sae, folder_name(dir), config_path);
  const bool transcoder = flag("transcode");
  if (transcoder) {  // the module's input to its output: an MLP's ("layers.12.mlp")
    if (sae.site != Site::kMlpOut) {
      fail_input("{}: a transcoder (transcode) at '{}': only an MLP's (layers.L.mlp) is read", config_path, folder_name(dir));
    }
    sae.site = Site::kMlpIn;
    sae.output_site = Site::kMlpOut;
    sae.subtract_decoder_bias = false;
  } else if (flag("skip_connection")) {
    fail_input("{}: skip_connection without transcode: a skip connection belongs to a transcoder", config_path);
  }
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
  // Not is_transcoder(): sae::load sets a plain SAE's output site, to the one it reads, only after this.
  if (transcoder) sae.d_out = sae.d_in;
  // sparsify adds x W_skip^T.
  if (flag("skip_connection")) sae.w_skip = read_tensor(file, "W_skip", {sae.d_in, sae.d_in}).t().contiguous();
  return sae;
}

}  // namespace probekit::sae
