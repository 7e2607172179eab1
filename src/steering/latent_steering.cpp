// Steering by SAE latent: --steer-latent NAME:INDEX=COEF adds COEF times the latent's decoder row as stored (as
// Neuronpedia and Goodfire steer), --clamp-latent NAME:INDEX=VALUE encodes the site's values, sets the latent to
// VALUE and adds the change (VALUE - z_i) W_dec[i], keeping what the SAE does not reconstruct. Both at every position,
// at the SAE's own layer and the site it reconstructs (a transcoder's mlp_out, its latents read from mlp_in or
// ln2_normalized).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/units.h"
#include "model/decoder_block.h"
#include "sae/sae_flags.h"
#include "steering/latent_steering.h"

namespace probekit::steering {

SteeringOp SteeringOp::sae_latent(SteeringAction action, std::string sae, int64_t latent, double coefficient) {
  SteeringOp op;
  op.action = action;
  op.source = SteeringSource::kLatent;
  op.sae = std::move(sae);
  op.latent = latent;
  op.coefficient = coefficient;
  return op;
}

namespace {

const char* latent_flag(SteeringAction action) { return action == SteeringAction::kClamp ? "--clamp-latent" : "--steer-latent"; }

}  // namespace

SteeringOp parse_latent_op(const std::string& text, SteeringAction action) {
  const char* flag = latent_flag(action);
  const char* form = action == SteeringAction::kClamp ? "NAME:INDEX=VALUE, e.g. res16k:1234=8"
                                                      : "NAME:INDEX=COEF, e.g. res16k:1234=40";
  const size_t colon = text.rfind(':'), equals = text.rfind('=');
  if (colon == std::string::npos || equals == std::string::npos || colon == 0 || equals < colon) {
    fail_usage("{} {}: expected {}", flag, text, form);
  }
  const std::string index = text.substr(colon + 1, equals - colon - 1);
  const std::optional<int> latent = parse_count(index);
  if (!latent) fail_usage("{} {}: the latent '{}' is not a latent index (expected {})", flag, text, index, form);
  const std::optional<double> value = parse_number(text.substr(equals + 1));
  if (!value) fail_usage("{} {}: '{}' is not a number (expected {})", flag, text, text.substr(equals + 1), form);
  check_coefficient(*value, fmt::format("{} {}", flag, text));
  SteeringOp op = SteeringOp::sae_latent(action, text.substr(0, colon), *latent, *value);
  op.from_flag = true;
  return op;
}

namespace {

// Whether a clamp sets latent `latent` of the SAE named `sae`.
auto of_latent(std::string sae, int64_t latent) {
  return [sae = std::move(sae), latent](const SteeringVectors::Clamp& clamp) {
    return clamp.sae->name == sae && clamp.latent == latent;
  };
}

}  // namespace

bool SteeringVectors::clamps_latent(const std::string& sae, int64_t latent) const {
  return std::any_of(clamps.begin(), clamps.end(), of_latent(sae, latent));
}

void SteeringVectors::replace_clamp(const Clamp& clamp) {
  clamps.erase(std::remove_if(clamps.begin(), clamps.end(), of_latent(clamp.sae->name, clamp.latent)), clamps.end());
  clamps.push_back(clamp);
}

std::pair<Site, int64_t> written_at(const sae::SparseAutoencoder& sae) {
  if (sae.output_site != Site::kResidPre) return {sae.output_site, sae.layer};
  if (sae.layer == 0) return {Site::kEmbeddings, -1};
  return {Site::kResidPost, sae.layer - 1};
}

at::Device device_of(const model::TransformerModel& model, int64_t layer) {
  return layer < model.loaded_layers() ? model.layer_device(std::max<int64_t>(layer, 0)) : model.device();
}

void resolve_latent(const SteeringOp& op, const std::vector<sae::SparseAutoencoder>& saes, SteeringVectors& vectors) {
  const std::string what = op.from_flag ? fmt::format("{} {}:{}", latent_flag(op.action), op.sae, op.latent)
                                        : fmt::format("latent {} of SAE '{}'", op.latent, op.sae);
  const sae::SparseAutoencoder& found = sae::find_sae(saes, op.sae, what);
  if (op.latent < 0 || op.latent >= found.d_sae) {
    fail_usage("{}: SAE '{}' has latents 0 to {}", what, found.name, found.d_sae - 1);
  }
  const auto [site, layer] = written_at(found);
  if (!site_row(site).writable()) {
    fail_usage("{}: SAE '{}' reconstructs {}, where nothing can be written (writable: {}, and resid_pre through the "
               "layer before)", what, found.name, site_name(found.output_site), site_names(true));
  }
  const Json source = {{"sae", found.name}, {"latent", op.latent}};
  if (op.action == SteeringAction::kClamp) {
    // Regression: a latent clamped twice had both changes added, as if set to the sum.
    if (vectors.clamps_latent(found.name, op.latent)) {
      fail_usage("{}: the latent is clamped twice; a clamp sets its value once", what);
    }
    vectors.clamps.push_back({std::make_shared<const sae::SparseAutoencoder>(found.to(at::kCPU)), op.latent,
                              op.coefficient, source});
    return;
  }
  vectors.additions.push_back({layer, found.w_dec[op.latent].to(at::kCPU, at::kFloat).clone(), op.coefficient, source, site});
}

void place_clamps(const SteeringVectors& vectors, const model::TransformerModel& model, const at::Tensor& rows,
                  model::StreamWrites& writes) {
  for (const SteeringVectors::Clamp& clamp : vectors.clamps) {
    const auto [site, layer] = written_at(*clamp.sae);
    const at::Device device = device_of(model, layer);
    auto on_device = std::make_shared<const sae::SparseAutoencoder>(clamp.sae->to(device));
    // Only the rows that clamp (a batch whose rows steer differently): a [B, 1, 1] mask; undefined for every row.
    const at::Tensor mask = rows.defined() ? rows.to(device).view({-1, 1, 1}) : at::Tensor();
    // A transcoder's latents are read from the branch's input (ln2_normalized: made from what its norm reads), and
    // the change goes into its output.
    const bool before_norm = on_device->is_transcoder() && on_device->site == Site::kLn2Normalized;
    const model::ModelConfig& config = model.config();
    auto change = [on_device, clamp, mask, before_norm, norm = config.features.norm, eps = config.norm_eps](
                      const at::Tensor& values, const model::BranchInput& branch_input) {
      const at::Tensor read = !on_device->is_transcoder() ? values
                              : before_norm ? model::normalized_before_weight(branch_input.before_norm, norm, eps)
                                            : branch_input.normed;
      const at::Tensor change =
          on_device->clamp_change(read.reshape({-1, read.size(-1)}), clamp.latent, clamp.value).view(values.sizes());
      return mask.defined() ? change * mask : change;
    };
    writes.add_by_value(site, layer, std::move(change), before_norm);
  }
}

}  // namespace probekit::steering
