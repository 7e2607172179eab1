// An SAE's files from anywhere (a hub release), read by sae::load as --sae reads them. The first byte picks the layout
// (SAELens, sparsify, Gemma Scope 2, Llama Scope, Gemma Scope), then a 4-byte little-endian length, the config's bytes
// (cfg.json, config.json or hyperparams.json; Gemma Scope has none) and the weights' bytes (the layout's safetensors
// file, or Gemma Scope's params.npz), written where the layout keeps them. The SAE is refused with a message, or loads
// with widths of at least 1, every tensor of the shape they give, a top-k of at least 1, and encodes, decodes and
// clamps a batch of rows.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/files.h"
#include "fuzz_util.h"
#include "sae/sae.h"

using namespace probekit;

namespace {

struct LayoutFiles {
  const char* folder;   // under the scratch folder; its path says the layer where the layout reads it from there
  const char* config;   // "" : none
  const char* weights;
};

const std::vector<LayoutFiles>& layouts() {
  static const std::vector<LayoutFiles> table = {
      {"saelens", "cfg.json", "sae_weights.safetensors"},
      {"sparsify/layers.3", "cfg.json", "sae.safetensors"},
      {"gemma_scope_2/resid_post/layer_3_width_8_l0_small", "config.json", "params.safetensors"},
      {"llama_scope", "hyperparams.json", "checkpoints/final.safetensors"},
      {"gemma_scope/gemma-scope-2b-pt-res/layer_3/width_8/average_l0_2", "", "params.npz"},
  };
  return table;
}

void check_shape(const at::Tensor& tensor, std::vector<int64_t> shape, const char* name) {
  if (tensor.defined() && tensor.sizes() != at::IntArrayRef(shape)) fuzz::finding(std::string("an accepted ") + name + " of another shape");
}

void check_accepted(const sae::SparseAutoencoder& sae) {
  if (sae.d_in < 1 || sae.d_sae < 1 || sae.d_out < 1) fuzz::finding("an SAE of a width below 1 was accepted");
  if (sae.architecture == sae::Architecture::kTopK && sae.k < 1) fuzz::finding("a top-k SAE with k below 1 was accepted");
  if (!sae.w_enc.defined() || !sae.w_dec.defined() || !sae.b_dec.defined()) fuzz::finding("an SAE without its weights");
  check_shape(sae.w_enc, {sae.d_in, sae.d_sae}, "W_enc");
  check_shape(sae.w_dec, {sae.d_sae, sae.d_out}, "W_dec");
  check_shape(sae.b_dec, {sae.d_out}, "b_dec");
  for (const at::Tensor* vector : {&sae.b_enc, &sae.threshold, &sae.b_gate, &sae.r_mag, &sae.b_mag}) {
    check_shape(*vector, {sae.d_sae}, "latent vector");
  }
  check_shape(sae.w_skip, {sae.d_in, sae.d_out}, "W_skip");
  try {
    const at::Tensor rows = at::ones({2, sae.d_in});
    const at::Tensor latents = sae.encode(rows);
    if (latents.sizes() != at::IntArrayRef({2, sae.d_sae})) fuzz::finding("latents are not [rows, d_sae]");
    if (sae.decode(latents, rows).sizes() != at::IntArrayRef({2, sae.d_out})) fuzz::finding("a reconstruction is not [rows, d_out]");
    if (sae.clamp_change(rows, sae.d_sae - 1, 1.0).sizes() != at::IntArrayRef({2, sae.d_out})) {
      fuzz::finding("a clamp's change is not [rows, d_out]");
    }
  } catch (const std::exception& e) {
    fuzz::finding(std::string("an accepted SAE failed to encode or decode: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const size_t config_size = data[1] | data[2] << 8 | data[3] << 16 | static_cast<size_t>(data[4]) << 24;
  if (config_size > size - 5) return 0;
  static const std::string root = [] {
    const std::string path = fuzz::scratch_path("saes");
    for (const LayoutFiles& layout : layouts()) make_directories(path + "/" + layout.folder + "/checkpoints");
    return path;
  }();
  const LayoutFiles& layout = layouts()[data[0] % layouts().size()];
  const std::string folder = root + "/" + layout.folder;
  if (*layout.config != '\0') fuzz::write_bytes(folder + "/" + layout.config, data + 5, config_size);
  fuzz::write_bytes(folder + "/" + layout.weights, data + 5 + config_size, size - 5 - config_size);

  sae::SparseAutoencoder sae;
  if (!fuzz::completes_or_refuses_cleanly([&] { sae = sae::load(folder); })) return 0;
  check_accepted(sae);
  return 0;
}
