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

struct SparseAutoencoder {
  std::string name;    // how tools refer to it (--sae NAME=PATH)
  std::string path;    // the folder or file it was read from
  std::string layout;  // the layout's name (layouts.cpp)
  Site site = Site::kResidPost;
  int64_t layer = -1;
  Architecture architecture = Architecture::kStandard;
  int64_t d_in = 0, d_sae = 0;
  int64_t k = 0;                     // kTopK
  bool subtract_decoder_bias = true;  // x - b_dec before encoding (SAELens' apply_b_dec_to_input)
  InputScaling scaling = InputScaling::kNone;
  double input_scale = 1.0;  // kConstant
  // fp32: w_enc [d_in, d_sae], b_enc [d_sae], w_dec [d_sae, d_in], b_dec [d_in]; threshold [d_sae] (kJumpRelu);
  // b_gate, r_mag, b_mag [d_sae] (kGated, which has no b_enc).
  at::Tensor w_enc, b_enc, w_dec, b_dec, threshold, b_gate, r_mag, b_mag;
  std::map<int64_t, std::string> descriptions;  // --sae-labels: what latents mean, shown beside them (not in record())

  /// The latents [rows, d_sae] (fp32) of rows [rows, d_in] of the SAE's site.
  at::Tensor encode(const at::Tensor& rows) const;
  /// The reconstruction [rows, d_in] of `latents` for `rows` (whose norms undo an input scaling).
  at::Tensor decode(const at::Tensor& latents, const at::Tensor& rows) const;
  /// What setting latent `latent` of each row of `rows` [N, d_in] to `value` changes the reconstruction by:
  /// (value - z_latent) W_dec[latent], scaled back as decode scales; fp32 [N, d_in].
  at::Tensor clamp_change(const at::Tensor& rows, int64_t latent, double value) const;
  /// The SAE moved to `device` (its tensors).
  SparseAutoencoder to(at::Device device) const;
  /// {"name", "path", "layout", "site", "layer", "architecture", "d_in", "d_sae", ...}: what a file made with it records.
  Json record() const;
};

const char* architecture_name(Architecture architecture);

/// Reads the SAE at `path` (a folder, or a layout's file), recognising its layout by its files; `name` empty: the
/// path's last component. Every tensor's shape is checked against d_in and d_sae; a missing tensor or field, an
/// unknown architecture or normalisation, or a per-head attention SAE (hook_z) is refused naming the file and field.
SparseAutoencoder load(const std::string& path, const std::string& name = "");

}  // namespace probekit::sae
