#include "readout/sites.h"

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
                               {Site::kMlpOut, "mlp_out"}};

}  // namespace

Site parse_site(const std::string& name) {
  for (const SiteName& entry : kSites) {
    if (name == entry.name) return entry.site;
  }
  fail_usage("--site {}: expected resid_post, resid_pre, resid_mid, attn_out or mlp_out", name);
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

}  // namespace probekit::readout
