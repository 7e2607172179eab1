// Google's Gemma Scope (layer_L/width_W/average_l0_N/params.npz, JumpReLU, no b_dec subtracted from the input; the
// site from the release's folder: its suffix -res, -mlp, -att or -transcoders) and Gemma Scope 2
// (<site>/layer_L_width_W_l0_S/params.safetensors with lowercase names + config.json naming the Hugging Face modules
// it reads and, for a transcoder, reconstructs; affine_connection: the skip affine_skip_connection [d_in, d_out]).
#include <regex>

#include "common/error.h"
#include "common/files.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

namespace {

// The JumpReLU tensors both layouts hold, under `names` (W_enc, W_dec, b_enc, b_dec, threshold in that order).
template <typename Read>
void read_jump_relu(SparseAutoencoder& sae, const std::vector<std::string>& names, Read&& read) {
  sae.architecture = Architecture::kJumpRelu;
  sae.subtract_decoder_bias = false;
  const int64_t d_in = sae.d_in, d_sae = sae.d_sae, d_out = sae.d_out > 0 ? sae.d_out : sae.d_in;
  sae.w_enc = read(names[0], std::vector<int64_t>{d_in, d_sae});
  sae.w_dec = read(names[1], std::vector<int64_t>{d_sae, d_out});
  sae.b_enc = read(names[2], std::vector<int64_t>{d_sae});
  sae.b_dec = read(names[3], std::vector<int64_t>{d_out});
  sae.threshold = read(names[4], std::vector<int64_t>{d_sae});
}

// d_in and d_sae from the encoder's shape.
void widths_from(SparseAutoencoder& sae, const std::vector<int64_t>& encoder, const std::string& path) {
  if (encoder.size() != 2) fail_input("{}: the encoder has {} dimensions, expected [d_in, d_sae]", path, encoder.size());
  sae.d_in = encoder[0];
  sae.d_sae = encoder[1];
}

// The release's kind (res, mlp, att or transcoders) from the folder named after the repository (gemma-scope-2b-pt-res,
// gemma-scope-9b-pt-res-canonical, a hub cache's models--google--gemma-scope-2b-pt-mlp): the files name no site.
std::string release_kind(const std::string& dir, const std::string& path) {
  static const std::regex release(R"((?:^|/)[^/]*gemma-scope-[^/]*-(res|mlp|att|transcoders)(?:-canonical)?(?:/|$))");
  std::smatch match;
  if (!std::regex_search(dir, match, release)) {
    fail_input("{}: Gemma Scope's files name no site: it comes from the release's folder (gemma-scope-2b-pt-res, "
               "-mlp, -att or -transcoders) above layer_L, which this path lacks; keep the release's name, as in "
               "gemma-scope-2b-pt-res/layer_12/width_16k/average_l0_82", path);
  }
  return match[1].str();
}

}  // namespace

SparseAutoencoder read_gemma_scope(const std::string& dir) {
  const std::string path = dir + "/params.npz";
  SparseAutoencoder sae;
  // The folders above the one given name the layer and the release: "." in average_l0_20 is read as the path to it,
  // as written (a tree of symlinked folders keeps its names), else with its links resolved.
  static const std::regex layer_folder(R"((?:^|/)layer_(\d{1,9})/)");
  std::string full = dir.front() == '/' ? dir : absolute_path(".") + "/" + dir;
  if (!std::regex_search(full, layer_folder)) full = absolute_path(dir);
  std::smatch match;
  if (!std::regex_search(full, match, layer_folder)) {
    fail_input("{}: Gemma Scope's path names the layer (layer_L/width_W/average_l0_N/params.npz); this one does not", path);
  }
  sae.layer = std::stoll(match[1].str());
  const std::string release = release_kind(full, path);
  if (release == "att") {
    fail_input("{}: a Gemma Scope attention SAE (-att) reads attention's per-head output (hook_z), which is not read", path);
  }
  sae.site = release == "mlp" ? Site::kMlpOut : Site::kResidPost;
  const std::map<std::string, npz::Array> arrays = npz::read_file(path);
  auto encoder = arrays.find("W_enc");
  if (encoder == arrays.end()) fail_input("{}: no array 'W_enc'", path);
  widths_from(sae, encoder->second.shape, path);
  // A transcoder release (-transcoders) reads the pre-MLP RMSNorm's output before its gain (folded into the MLP for
  // training, as the release's README says; SAELens names its hook ln2.hook_normalized) and reconstructs the MLP's
  // output.
  if (release == "transcoders") {
    sae.site = Site::kLn2Normalized;
    sae.output_site = Site::kMlpOut;
    sae.d_out = sae.d_in;
  }
  read_jump_relu(sae, {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"},
                 [&](const std::string& name, const std::vector<int64_t>& shape) { return read_array(arrays, name, shape, path); });
  return sae;
}

SparseAutoencoder read_gemma_scope_2(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  const Json config = read_config(config_path);
  const std::string architecture = config_string(config, "architecture", config_path);
  if (architecture != "jump_relu") fail_input("{}: architecture '{}' is not read (read: jump_relu)", config_path, architecture);
  const std::string in = config_string(config, "hf_hook_point_in", config_path);
  const std::string out = config.contains("hf_hook_point_out") ? config_string(config, "hf_hook_point_out", config_path) : in;
  const bool skip = json_value<bool>(config, "affine_connection", false, config_path);
  SparseAutoencoder sae;
  read_input_site(sae, in, config_path);
  const safetensors::File file(dir + "/params.safetensors");
  const safetensors::TensorInfo* encoder = file.find("w_enc");
  if (encoder == nullptr) fail_input("{}: no tensor 'w_enc'", file.path());
  widths_from(sae, encoder->shape, file.path());
  if (in != out || skip) {  // a transcoder: hf_hook_point_out is what it reconstructs
    read_output_site(sae, out, config_path);
    const safetensors::TensorInfo* decoder = file.find("w_dec");
    if (decoder == nullptr || decoder->shape.size() != 2) fail_input("{}: no 2-D tensor 'w_dec'", file.path());
    sae.d_out = decoder->shape[1];
  }
  read_jump_relu(sae, {"w_enc", "w_dec", "b_enc", "b_dec", "threshold"},
                 [&](const std::string& name, const std::vector<int64_t>& shape) { return read_tensor(file, name, shape); });
  // Google's definition adds W_skip x with affine_skip_connection [d_in, d_out] (gemma_penzai's Gemma Scope 2
  // notebook); SAELens multiplies by its transpose.
  if (skip) sae.w_skip = read_tensor(file, "affine_skip_connection", {sae.d_in, sae.d_out});
  return sae;
}

}  // namespace probekit::sae
