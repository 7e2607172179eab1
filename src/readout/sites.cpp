#include "readout/sites.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"

namespace probekit::readout {

Position parse_position(const std::string& name) {
  if (name == "last") return Position::kLast;
  if (name == "mean") return Position::kMean;
  if (name == "max") return Position::kMax;
  if (name == "all") return Position::kAll;
  fail_usage("--position {}: expected last, mean, max or all", name);
}

std::string position_name(Position position) {
  switch (position) {
    case Position::kLast: return "last";
    case Position::kMean: return "mean";
    case Position::kMax: return "max";
    case Position::kAll: return "all";
  }
  return "?";
}

int64_t site_width(Site site, const model::ModelConfig& config) {
  switch (site_row(site).width) {
    case SiteWidth::kHidden: return config.hidden_size;
    case SiteWidth::kExperts: return config.routed_experts.experts;
    case SiteWidth::kTwiceTopK: return 2 * config.routed_experts.top_k;
  }
  return config.hidden_size;
}

void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config) {
  const SiteRow& row = site_row(site);
  if (!row.poolable && (position == Position::kMean || position == Position::kMax)) {
    fail_usage("--site {} stores {}, which cannot be pooled: use --position last or all (not {})", row.name,
               row.meaning, position_name(position));
  }
  if (!row.routed) return;
  const std::vector<int64_t> routed = model::routed_expert_layers(config);
  if (routed.empty()) {
    fail_usage("--site {}: the model ({}) has no routed experts, so no layer has a router", site_name(site),
               config.text_model_type);
  }
  for (int64_t layer : layers) {
    if (std::find(routed.begin(), routed.end(), layer) == routed.end()) {
      fail_usage("--site {}: layer {} is a dense layer without a router; the layers with a router are {}",
                 site_name(site), layer, fmt::join(routed, ","));
    }
  }
}

}  // namespace probekit::readout
