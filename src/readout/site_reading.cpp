#include "readout/site_reading.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"

namespace probekit::readout {

int64_t site_width(Site site, const model::ModelConfig& config) {
  switch (site_row(site).width) {
    case SiteWidth::kHidden: return config.hidden_size;
    case SiteWidth::kExperts: return config.routed_experts.experts;
    case SiteWidth::kTwiceTopK: return 2 * config.routed_experts.top_k;
  }
  return config.hidden_size;
}

std::string site_width_described(Site site, const model::ModelConfig& config, const std::string& model_dir) {
  switch (site_row(site).width) {
    case SiteWidth::kHidden: return fmt::format("the model in {} has hidden size {}", model_dir, config.hidden_size);
    case SiteWidth::kExperts:
      return fmt::format("the routers of the model in {} score {} experts", model_dir, config.routed_experts.experts);
    case SiteWidth::kTwiceTopK:
      return fmt::format("the routers of the model in {} choose {} experts ({} values)", model_dir,
                         config.routed_experts.top_k, 2 * config.routed_experts.top_k);
  }
  return "";
}

std::vector<int64_t> layers_having(Site site, const model::ModelConfig& config) {
  if (site_row(site).routed()) return model::routed_expert_layers(config);
  std::vector<int64_t> all(static_cast<size_t>(config.num_layers));
  for (int64_t layer = 0; layer < config.num_layers; ++layer) all[static_cast<size_t>(layer)] = layer;
  return all;
}

void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config) {
  const SiteRow& row = site_row(site);
  if (!row.poolable() && (position == Position::kMean || position == Position::kMax)) {
    fail_usage("--site {} stores {}, which cannot be pooled: use --position last or all (not {})", row.name,
               row.meaning, position_name(position));
  }
  if (site == Site::kLn2Normalized && !config.features.input_norms) {
    fail_usage("--site {}: the model ({}) has no norm before its MLP (its MLP reads resid_mid: --site mlp_in)",
               site_name(site), config.text_model_type);
  }
  const std::vector<int64_t> having = layers_having(site, config);
  if (row.routed() && having.empty()) {
    fail_usage("--site {}: the model ({}) has no routed experts, so no layer has a router", site_name(site),
               config.text_model_type);
  }
  for (int64_t layer : layers) {
    if (row.routed() && std::find(having.begin(), having.end(), layer) == having.end()) {
      fail_usage("--site {}: layer {} is a dense layer without a router; the layers with a router are {}",
                 site_name(site), layer, fmt::join(having, ","));
    }
  }
}

}  // namespace probekit::readout
