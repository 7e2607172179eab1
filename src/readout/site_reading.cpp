#include "readout/site_reading.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "model/site_layers.h"

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

void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config) {
  const SiteRow& row = site_row(site);
  if (!row.poolable() && (position == Position::kMean || position == Position::kMax)) {
    fail_usage("--site {} stores {}, which cannot be pooled: use --position last or all (not {})", row.name,
               row.meaning, position_name(position));
  }
  const std::vector<int64_t> having = model::layers_having(site, config);
  if (having.empty()) {
    fail_usage("--site {}: the model ({}) {}", site_name(site), config.text_model_type,
               model::why_no_layer_has(site, config));
  }
  for (int64_t layer : layers) {
    if (row.routed() && std::find(having.begin(), having.end(), layer) == having.end()) {
      fail_usage("--site {}: layer {} is a dense layer without a router; the layers with a router are {}",
                 site_name(site), layer, fmt::join(having, ","));
    }
  }
}

}  // namespace probekit::readout
