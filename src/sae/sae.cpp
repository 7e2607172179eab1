#include "sae/sae.h"

#include <cmath>

#include "common/error.h"

namespace probekit::sae {

namespace {

// Each row's factor onto the SAE's input scale: sqrt(d_in) / |row| (constant_norm_rescale), or the constant.
at::Tensor input_factors(const SparseAutoencoder& sae, const at::Tensor& x) {
  if (sae.scaling == InputScaling::kConstantNormRescale) {
    return std::sqrt(static_cast<double>(sae.d_in)) / x.norm(2, -1, true).clamp_min(1e-30);
  }
  return at::full({x.size(0), 1}, sae.scaling == InputScaling::kConstant ? sae.input_scale : 1.0, x.options());
}

void check_rows(const SparseAutoencoder& sae, const at::Tensor& rows, int64_t width, const char* what) {
  if (rows.dim() != 2 || rows.size(1) != width) {
    fail_input("SAE '{}' ({}): {} of shape [{}], expected [rows, {}]", sae.name, sae.path, what,
               fmt::join(rows.sizes(), ", "), width);
  }
}

}  // namespace

const char* architecture_name(Architecture architecture) {
  switch (architecture) {
    case Architecture::kStandard: return "standard";
    case Architecture::kTopK: return "topk";
    case Architecture::kJumpRelu: return "jumprelu";
    case Architecture::kGated: return "gated";
  }
  return "unknown";
}

at::Tensor SparseAutoencoder::encode(const at::Tensor& rows) const {
  check_rows(*this, rows, d_in, "rows to encode");
  at::Tensor x = rows.to(w_enc.device(), at::kFloat);
  x = x * input_factors(*this, x);
  if (subtract_decoder_bias) x = x - b_dec;
  if (architecture == Architecture::kGated) {
    const at::Tensor open = (at::matmul(x, w_enc) + b_gate) > 0;
    return open.to(at::kFloat) * at::relu(at::matmul(x, w_enc * at::exp(r_mag).unsqueeze(0)) + b_mag);
  }
  const at::Tensor h = at::matmul(x, w_enc) + b_enc;
  switch (architecture) {
    case Architecture::kTopK: {
      const auto [values, indices] = h.topk(std::min(k, d_sae), -1);
      return at::zeros_like(h).scatter_(-1, indices, at::relu(values));
    }
    case Architecture::kJumpRelu:
      return at::relu(h) * (h > threshold).to(at::kFloat);
    default:
      return at::relu(h);
  }
}

at::Tensor SparseAutoencoder::decode(const at::Tensor& latents, const at::Tensor& rows) const {
  check_rows(*this, latents, d_sae, "latents to decode");
  check_rows(*this, rows, d_in, "rows");
  const at::Tensor reconstruction = at::matmul(latents.to(w_dec.device(), at::kFloat), w_dec) + b_dec;
  return reconstruction / input_factors(*this, rows.to(w_dec.device(), at::kFloat));
}

at::Tensor SparseAutoencoder::clamp_change(const at::Tensor& rows, int64_t latent, double value) const {
  const at::Tensor x = rows.to(w_dec.device(), at::kFloat);
  const at::Tensor z = encode(x).select(1, latent).unsqueeze(1);  // [N, 1]
  return (value - z) * w_dec[latent].unsqueeze(0) / input_factors(*this, x);
}

SparseAutoencoder SparseAutoencoder::to(at::Device device) const {
  SparseAutoencoder moved = *this;
  for (at::Tensor* t : {&moved.w_enc, &moved.b_enc, &moved.w_dec, &moved.b_dec, &moved.threshold, &moved.b_gate,
                        &moved.r_mag, &moved.b_mag}) {
    if (t->defined()) *t = t->to(device);
  }
  return moved;
}

Json SparseAutoencoder::record() const {
  Json out = {{"name", name},
              {"path", path},
              {"layout", layout},
              {"site", site_name(site)},
              {"layer", layer},
              {"architecture", architecture_name(architecture)},
              {"d_in", d_in},
              {"d_sae", d_sae},
              {"subtract_decoder_bias", subtract_decoder_bias}};
  if (architecture == Architecture::kTopK) out["k"] = k;
  if (scaling == InputScaling::kConstantNormRescale) out["input_scaling"] = "constant_norm_rescale";
  if (scaling == InputScaling::kConstant) out["input_scaling"] = input_scale;
  return out;
}

}  // namespace probekit::sae
