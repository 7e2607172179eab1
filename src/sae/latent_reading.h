// Rows of an SAE site (--site sae:NAME, sae-error:NAME) as the readout makes them: each token's values at the SAE's
// site turned into (latents, input, reconstruction), pooled over tokens where the position pools, then kept as the
// latents, the error x - reconstruction, or the latents' top k with the row's L0 and relative error (the sparse rows
// activation files store: activations/readout_recipe.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "sae/sae.h"
#include "sites/sae_site.h"

namespace probekit::sae {

struct LatentReading {
  const SparseAutoencoder* sae = nullptr;  // on the device of the values it reads
  SaeOutput output = SaeOutput::kLatents;
  int64_t top_k = 0;  // keep each row's k largest latents; 0: every latent
  bool packed = true;  // with top_k: the sparse rows a file stores; else dense rows holding the top k only (what
                       // probes trained on such a file read)
  bool measures_error = true;  // false (latents shown beside tokens, which show no error): nothing is decoded, the
                               // packed rows' error column is NaN; latents only

  /// Whether per_token takes the output site's values beside the input's: a transcoder's error is its output's.
  bool reads_output() const;
  /// Values per row of finish(): d_sae (latents), d_out (error), or 2 K + 2 (packed sparse latents).
  int64_t width() const;
  /// Each token's [..., d_in] values at the SAE's site (with reads_output(): [..., d_in + d_out], the input's then
  /// the output site's) as [..., d_sae + 2 d_out] in fp32: the latents, what they reconstruct (the input, or the
  /// output) and the error x - x_hat (what mean and max pooling pool, each per token); [..., d_sae] without
  /// measures_error.
  at::Tensor per_token(const at::Tensor& values) const;
  /// Rows [N, width()] of per_token's rows [N, d_sae + 2 d_out] (pooled or not). Sparse rows: the K largest latents'
  /// indices (exact in fp32; -1 past the row's L0) and values, the row's L0, and |x - x_hat| / |x|.
  at::Tensor finish(const at::Tensor& rows) const;
};

/// A latent shown beside probe scores: its index, its value and what it means where --sae-labels says.
struct ShownLatent {
  int64_t index = 0;
  float value = 0;
  std::string description;
};
using TopLatents = std::vector<ShownLatent>;

/// The latents of a packed row [2 K + 2] of finish() (on the host), largest first, those past its L0 left out, each
/// with `sae`'s description of it.
TopLatents unpack_latents(const at::Tensor& packed_row, const SparseAutoencoder& sae);
/// [{"latent": index, "value": value, "description": text (where there is one)}, ...].
Json latents_json(const TopLatents& latents);

}  // namespace probekit::sae
