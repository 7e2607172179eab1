#include "sae/sae.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/sha256.h"

namespace probekit::sae {

namespace {

// Each row's factor onto the SAE's input scale: sqrt(d_in) / |row| (constant_norm_rescale), or the constant.
at::Tensor input_factors(const SparseAutoencoder& sae, const at::Tensor& x) {
  if (sae.scaling == InputScaling::kConstantNormRescale) {
    return std::sqrt(static_cast<double>(sae.d_in)) / x.norm(2, -1, true).clamp_min(1e-30);
  }
  return at::full({x.size(0), 1}, sae.scaling == InputScaling::kConstant ? sae.input_scale : 1.0, x.options());
}

// What divides a reconstruction back onto the values' scale: an SAE's input factors, a transcoder's output scale.
at::Tensor output_factors(const SparseAutoencoder& sae, const at::Tensor& x) {
  if (sae.is_transcoder()) return at::full({x.size(0), 1}, sae.output_scale, x.options());
  return input_factors(sae, x);
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
      // at::topk keeps no stated one of tied values: the k-th largest value decides, and of the latents equal to it
      // the lower indices fill what is left of k.
      const int64_t kept = std::min(k, d_sae);
      const at::Tensor kth = std::get<0>(h.topk(kept, -1)).narrow(-1, kept - 1, 1);
      const at::Tensor above = h > kth, tied = h == kth;
      const at::Tensor keep = above | (tied & (tied.cumsum(-1, at::kInt) <= kept - above.sum(-1, true)));
      return at::where(keep, at::relu(h), at::zeros({}, h.options()));
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
  const at::Tensor x = rows.to(w_dec.device(), at::kFloat);
  const at::Tensor reconstruction = (at::matmul(latents.to(w_dec.device(), at::kFloat), w_dec) + b_dec) / output_factors(*this, x);
  return w_skip.defined() ? reconstruction + at::matmul(x, w_skip) : reconstruction;
}

at::Tensor SparseAutoencoder::clamp_change(const at::Tensor& rows, int64_t latent, double value) const {
  const at::Tensor x = rows.to(w_dec.device(), at::kFloat);
  const at::Tensor z = encode(x).select(1, latent).unsqueeze(1);  // [N, 1]
  return (value - z) * w_dec[latent].unsqueeze(0) / output_factors(*this, x);
}

namespace {

// The tensors an SAE may hold, by the role names its record and messages use.
std::vector<std::pair<const char*, const at::Tensor*>> named_tensors(const SparseAutoencoder& sae) {
  return {{"W_enc", &sae.w_enc},     {"b_enc", &sae.b_enc},   {"W_dec", &sae.w_dec},
          {"b_dec", &sae.b_dec},     {"threshold", &sae.threshold}, {"b_gate", &sae.b_gate},
          {"r_mag", &sae.r_mag},     {"b_mag", &sae.b_mag},   {"W_skip", &sae.w_skip}};
}

}  // namespace

void SparseAutoencoder::check(const std::string& where) const {
  if (architecture == Architecture::kTopK && k < 1) fail_input("{}: TopK's k is {}, expected 1 or more", where, k);
  if (architecture == Architecture::kTopK && k > d_sae) {
    fail_input("{}: TopK's k is {}, but the dictionary has {} latents", where, k, d_sae);
  }
  for (const auto& [role, tensor] : named_tensors(*this)) {
    if (!tensor->defined() || at::isfinite(*tensor).all().item<bool>()) continue;
    const int64_t first = at::logical_not(at::isfinite(*tensor)).flatten().nonzero()[0][0].item<int64_t>();
    fail_input("{}: {} holds NaN or Inf (first at flat index {} of [{}])", where, role, first,
               fmt::join(tensor->sizes(), ", "));
  }
  if (!is_transcoder()) return;
  if ((site != Site::kMlpIn && site != Site::kLn2Normalized) || output_site != Site::kMlpOut) {
    fail_input("{}: a transcoder from {} to {} is not read (read: mlp_in or ln2_normalized to mlp_out, the MLP's "
               "input to its output)",
               where, site_name(site), site_name(output_site));
  }
  if (subtract_decoder_bias) {
    fail_input("{}: a transcoder cannot subtract b_dec (the output's bias) from its input (apply_b_dec_to_input)", where);
  }
  if (w_skip.defined() && w_skip.sizes() != at::IntArrayRef{d_in, d_out}) {
    fail_input("{}: the skip connection has shape [{}], expected [{}, {}]", where, fmt::join(w_skip.sizes(), ", "), d_in, d_out);
  }
}

SparseAutoencoder SparseAutoencoder::to(at::Device device) const {
  SparseAutoencoder moved = *this;
  for (at::Tensor* t : {&moved.w_enc, &moved.b_enc, &moved.w_dec, &moved.b_dec, &moved.threshold, &moved.b_gate,
                        &moved.r_mag, &moved.b_mag, &moved.w_skip}) {
    if (t->defined()) *t = t->to(device);
  }
  return moved;
}

std::string SparseAutoencoder::weights_fingerprint() const {
  constexpr int64_t kSample = 65536;
  Sha256 hash;
  for (const auto& [role, tensor] : named_tensors(*this)) {
    if (!tensor->defined()) continue;
    const at::Tensor flat = tensor->flatten();
    const int64_t step = (flat.numel() + kSample - 1) / kSample;  // at most kSample values
    const at::Tensor sample = flat.slice(0, 0, flat.numel(), std::max<int64_t>(1, step)).to(at::kCPU, at::kFloat).contiguous();
    hash.update(fmt::format("{}[{}]", role, fmt::join(tensor->sizes(), ",")));
    hash.update(std::string_view(static_cast<const char*>(sample.data_ptr()), sample.nbytes()));
  }
  return hash.hex_digest();
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
  if (is_transcoder()) {
    out["output_site"] = site_name(output_site);
    out["d_out"] = d_out;
    out["skip_connection"] = w_skip.defined();
    if (output_scale != 1.0) out["output_scale"] = output_scale;
  }
  if (architecture == Architecture::kTopK) out["k"] = k;
  if (!fingerprint.empty()) out["fingerprint"] = fingerprint;
  if (scaling == InputScaling::kConstantNormRescale) out["input_scaling"] = "constant_norm_rescale";
  if (scaling == InputScaling::kConstant) out["input_scaling"] = input_scale;
  return out;
}

}  // namespace probekit::sae
