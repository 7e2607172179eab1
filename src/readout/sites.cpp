#include "readout/sites.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"

namespace probekit::readout {

namespace {

struct SiteName {
  Site site;
  const char* name;
};
constexpr SiteName kSites[] = {{Site::kResidPost, "resid_post"},
                               {Site::kResidPre, "resid_pre"},
                               {Site::kResidMid, "resid_mid"},
                               {Site::kAttnOut, "attn_out"},
                               {Site::kMlpOut, "mlp_out"},
                               {Site::kRouter, "router"},
                               {Site::kExperts, "experts"}};

}  // namespace

Site parse_site(const std::string& name) {
  for (const SiteName& entry : kSites) {
    if (name == entry.name) return entry.site;
  }
  fail_usage("--site {}: expected resid_post, resid_pre, resid_mid, attn_out, mlp_out, router or experts", name);
}

Position parse_position(const std::string& name) {
  if (name == "last") return Position::kLast;
  if (name == "mean") return Position::kMean;
  if (name == "max") return Position::kMax;
  if (name == "all") return Position::kAll;
  fail_usage("--position {}: expected last, mean, max or all", name);
}

const char* site_name(Site site) {
  for (const SiteName& entry : kSites) {
    if (site == entry.site) return entry.name;
  }
  return "?";
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
  if (site == Site::kRouter) return config.routed_experts.experts;
  if (site == Site::kExperts) return 2 * config.routed_experts.top_k;
  return config.hidden_size;
}

void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config) {
  if (site != Site::kRouter && site != Site::kExperts) return;
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
  if (site == Site::kExperts && (position == Position::kMean || position == Position::kMax)) {
    fail_usage("--site experts stores expert ids, which cannot be pooled: use --position last or all (not {})",
               position_name(position));
  }
}

}  // namespace probekit::readout
