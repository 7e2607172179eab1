#include "model/site_layers.h"

namespace probekit::model {

std::vector<int64_t> layers_having(Site site, const ModelConfig& config) {
  if (site_row(site).routed()) return routed_expert_layers(config);
  if (site == Site::kLn2Normalized && !config.features.input_norms) return {};
  std::vector<int64_t> all(static_cast<size_t>(config.num_layers));
  for (int64_t layer = 0; layer < config.num_layers; ++layer) all[static_cast<size_t>(layer)] = layer;
  return all;
}

std::string why_no_layer_has(Site site, const ModelConfig& config) {
  if (site_row(site).routed()) return "has no routed experts, so no layer has a router";
  if (site == Site::kLn2Normalized) {
    return "has no norm before its MLP, which reads resid_mid (ln2_normalized is that norm's output before its "
           "weight; mlp_in is the MLP's input)";
  }
  return "has no layers";
}

}  // namespace probekit::model
