// The one table of sites: the named points of a forward pass where activations are read (the readout's --site,
// in TransformerLens' naming, plus a routed layer's router and chosen experts) and where steering writes. The
// decoder emits its values under these names, the readout asks for them, files record them, and steering plans
// name where they write: each reads its row here, and each name is written once, in sites.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace probekit {

/// A named point of a forward pass. kEmbeddings (the first layer's input) and kFinalNorm (the last layer's output
/// after the final norm) occur once a pass; the others at each decoder layer.
enum class Site { kEmbeddings, kResidPre, kAttnOut, kResidMid, kMlpOut, kResidPost, kFinalNorm, kRouter, kExperts };

/// How many values a row of a site holds.
enum class SiteWidth {
  kHidden,     // the hidden size
  kExperts,    // one per routed expert: the router's logits before the softmax
  kTwiceTopK,  // the k chosen experts' ids (exact in fp32, most probable first), then their k weights
};

/// One row of the table.
struct SiteRow {
  Site site;
  const char* name;  // the --site value, the files' attribute, the hook's name
  SiteWidth width;
  bool readable;     // --site may name it (read at each decoder layer)
  bool routed;       // only layers with routed experts have it
  bool poolable;     // mean and max pooling apply to its rows
  bool writable;     // steering may write into it
  const char* meaning;
};

/// Every site, in the order of the enum.
const std::vector<SiteRow>& site_table();
const SiteRow& site_row(Site site);
const char* site_name(Site site);
/// The site of a name, if one has it.
std::optional<Site> find_site(const std::string& name);
/// Parses --site: a readable site's name; anything else is a usage error listing them.
Site parse_site(const std::string& name);
/// "resid_post, resid_pre, ..." of the sites that are readable (or writable), for messages and help.
std::string site_names(bool writable = false);

/// The bit of a site in a set of sites (a forward pass's hook is given the sites of its set).
constexpr uint32_t site_bit(Site site) { return 1u << static_cast<uint32_t>(site); }
/// Every site.
constexpr uint32_t kAllSites = (1u << (static_cast<uint32_t>(Site::kExperts) + 1)) - 1;

}  // namespace probekit
