#include "sae/latent_reading.h"

#include <algorithm>
#include <limits>

#include "activations/readout_recipe.h"

namespace probekit::sae {

bool LatentReading::reads_output() const { return sae->is_transcoder() && measures_error; }

int64_t LatentReading::width() const {
  if (output == SaeOutput::kError) return sae->d_out;
  return top_k > 0 && packed ? activations::sparse_latent_row_width(top_k) : sae->d_sae;
}

at::Tensor LatentReading::per_token(const at::Tensor& values) const {
  const int64_t d_in = sae->d_in, d_out = sae->d_out;
  const at::Tensor rows = values.reshape({-1, values.size(-1)}).to(at::kFloat);
  const at::Tensor x = reads_output() ? rows.narrow(1, 0, d_in) : rows;
  const at::Tensor latents = sae->encode(x);
  std::vector<int64_t> shape(values.sizes().begin(), values.sizes().end());
  if (!measures_error) {
    shape.back() = sae->d_sae;
    return latents.reshape(shape);
  }
  const at::Tensor target = reads_output() ? rows.narrow(1, d_in, d_out) : x;
  // The error per token, so that a pooling position pools it as it pools any site (a max of x less a max of its
  // reconstruction is not the error's max).
  const at::Tensor missed = target - sae->decode(latents, x);
  shape.back() = sae->d_sae + 2 * d_out;
  return at::cat({latents, target, missed}, 1).reshape(shape);
}

at::Tensor LatentReading::finish(const at::Tensor& rows) const {
  const at::Tensor latents = rows.narrow(1, 0, sae->d_sae);
  // |x - x_hat| per row, and x - x_hat where the output is the error.
  auto error = [&](bool relative) {
    if (!measures_error) return at::full({rows.size(0), 1}, std::numeric_limits<float>::quiet_NaN(), rows.options());
    const at::Tensor x = rows.narrow(1, sae->d_sae, sae->d_out);
    const at::Tensor missed = rows.narrow(1, sae->d_sae + sae->d_out, sae->d_out);
    if (!relative) return missed;
    return missed.norm(2, 1, true) / x.norm(2, 1, true).clamp_min(std::numeric_limits<float>::min());
  };
  if (output == SaeOutput::kError) return error(false);
  if (top_k == 0) return latents.contiguous();
  // Latents are never negative (ReLU, JumpReLU, the gate): a row's first L0 of its top k are its nonzero ones.
  const int64_t k = std::min(top_k, sae->d_sae);
  auto [values, indices] = latents.topk(k, 1);
  if (!packed) return at::zeros_like(latents).scatter_(1, indices, values);
  const at::Tensor held = values > 0;
  values = values * held;
  at::Tensor ids = at::where(held, indices.to(at::kFloat), at::full({}, -1.0f, values.options()));
  if (k < top_k) {  // a dictionary narrower than K: the slots past it hold nothing
    const at::Tensor none = at::full({rows.size(0), top_k - k}, -1.0f, values.options());
    ids = at::cat({ids, none}, 1);
    values = at::cat({values, at::zeros_like(none)}, 1);
  }
  const at::Tensor l0 = (latents > 0).sum(1, true).to(at::kFloat);
  return at::cat({ids, values, l0, error(true)}, 1);
}

TopLatents unpack_latents(const at::Tensor& packed_row, const SparseAutoencoder& sae) {
  const at::Tensor row = packed_row.to(at::kFloat).contiguous();
  const float* values = row.data_ptr<float>();
  const int64_t k = (row.numel() - 2) / 2;
  TopLatents top;
  for (int64_t j = 0; j < k && values[j] >= 0; ++j) {
    const auto index = static_cast<int64_t>(values[j]);
    auto description = sae.descriptions.find(index);
    top.push_back({index, values[k + j], description != sae.descriptions.end() ? description->second : ""});
  }
  return top;
}

Json latents_json(const TopLatents& latents) {
  Json out = Json::array();
  for (const ShownLatent& latent : latents) {
    out.push_back({{"latent", latent.index}, {"value", latent.value}});
    if (!latent.description.empty()) out.back()["description"] = latent.description;
  }
  return out;
}

}  // namespace probekit::sae
