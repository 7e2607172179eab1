// A sparse autoencoder (or transcoder) as published: the dictionary, where in the model it reads (site and layer),
// and its encoding of a site's rows into latents and their decoding back. The layouts it is read from are rows of one
// table (layouts.cpp); each reader turns its files into this one record.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "sites/sites.h"

namespace probekit::sae {

/// How latents are computed from the pre-activations h = x' W_enc + b_enc (x': the input, with b_dec subtracted where
/// the SAE says so, and scaled where it normalises its inputs).
enum class Architecture {
  kStandard,  // relu(h)
  kTopK,      // the k largest of h, ReLU'd; zeros elsewhere (ties to the lower index)
  kJumpRelu,  // h where h > threshold, else 0
  kGated,     // (x' W_enc + b_gate > 0) * relu(x' (W_enc * exp(r_mag)) + b_mag)
};

/// How inputs are scaled before encoding (the reconstruction is scaled back).
enum class InputScaling {
  kNone,
  kConstantNormRescale,  // each row to norm sqrt(d_in) (SAELens' constant_norm_rescale)
  kConstant,             // every row times input_scale (a dataset's average norm folded in)
};

/// A transcoder reads one site and reconstructs another: the MLP's input (mlp_in, or ln2_normalized: its norm's output
/// before the weight) and its output (mlp_out) of one layer. An SAE reconstructs the site it reads (output_site == site, d_out == d_in).
struct SparseAutoencoder {
  std::string name;    // how tools refer to it (--sae NAME=PATH)
  std::string path;    // the folder or file it was read from
  std::string layout;  // the layout's name (layouts.cpp)
  Site site = Site::kResidPost;         // what it encodes
  Site output_site = Site::kResidPost;  // what it reconstructs (and where steering by its latents writes)
  int64_t layer = -1;
  Architecture architecture = Architecture::kStandard;
  int64_t d_in = 0, d_sae = 0, d_out = 0;
  int64_t k = 0;                     // kTopK
  bool subtract_decoder_bias = true;  // x - b_dec before encoding (SAELens' apply_b_dec_to_input)
  InputScaling scaling = InputScaling::kNone;
  double input_scale = 1.0;   // kConstant
  double output_scale = 1.0;  // a transcoder's reconstruction is divided by it (Llama Scope's output norm)
  // Reads (or, a transcoder, reconstructs) an attention or MLP module's own output, before any post-norm (sparsify's
  // hookpoints layers.L.self_attn and layers.L.mlp): on Gemma 2/3 that is not attn_out or mlp_out.
  bool raw_module_output = false;
  // fp32: w_enc [d_in, d_sae], b_enc [d_sae], w_dec [d_sae, d_out], b_dec [d_out]; threshold [d_sae] (kJumpRelu);
  // b_gate, r_mag, b_mag [d_sae] (kGated, which has no b_enc); w_skip [d_in, d_out] (a transcoder's linear skip
  // connection from its raw input, x w_skip; undefined: none).
  at::Tensor w_enc, b_enc, w_dec, b_dec, threshold, b_gate, r_mag, b_mag, w_skip;
  std::map<int64_t, std::string> descriptions;  // --sae-labels: what latents mean, shown beside them (not in record())
  std::string fingerprint;  // weights_fingerprint() at load: which weights, where the widths cannot tell two SAEs apart

  bool is_transcoder() const { return output_site != site; }
  /// The latents [rows, d_sae] (fp32) of rows [rows, d_in] of the SAE's site.
  at::Tensor encode(const at::Tensor& rows) const;
  /// The reconstruction [rows, d_out] of `latents` for `rows` [rows, d_in] (whose norms undo an input scaling; a
  /// transcoder's skip connection reads them).
  at::Tensor decode(const at::Tensor& latents, const at::Tensor& rows) const;
  /// What setting latent `latent` of each row of `rows` [N, d_in] to `value` changes the reconstruction by:
  /// (value - z_latent) W_dec[latent], scaled back as decode scales; fp32 [N, d_out].
  at::Tensor clamp_change(const at::Tensor& rows, int64_t latent, double value) const;
  /// Refuses, naming `where`, what no reader may build: a transcoder that subtracts b_dec (of the output's width) from
  /// its input or scales its input per row, tensors of other shapes than the widths say, a TopK k past the width, a
  /// tensor holding NaN or Inf.
  void check(const std::string& where) const;
  /// SHA-256 of each tensor's role, shape and a strided sample of its values (at most 64 Ki of each, the biases whole
  /// where small): cheap at load, and different for any two trained dictionaries.
  std::string weights_fingerprint() const;
  /// The SAE moved to `device` (its tensors).
  SparseAutoencoder to(at::Device device) const;
  /// {"name", "path", "layout", "site", "layer", "architecture", "d_in", "d_sae", ...}: what a file made with it records.
  Json record() const;
};

const char* architecture_name(Architecture architecture);

/// Reads the SAE at `path` (a folder, or a layout's file), recognising its layout by its files; `name` empty: the
/// path's last component. Every tensor's shape is checked against d_in, d_sae and d_out; a missing tensor or field, an
/// unknown architecture or normalisation, or a per-head attention SAE (hook_z) is refused naming the file and field.
SparseAutoencoder load(const std::string& path, const std::string& name = "");

}  // namespace probekit::sae
