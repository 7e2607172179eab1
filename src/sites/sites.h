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
enum class Site {
  kEmbeddings, kResidPre, kAttnOut, kResidMid, kLn2Normalized, kMlpIn, kMlpOut, kResidPost, kFinalNorm, kRouter, kExperts
};

/// How many values a row of a site holds.
enum class SiteWidth {
  kHidden,     // the hidden size
  kExperts,    // one per routed expert: the router's logits before the softmax
  kTwiceTopK,  // the k chosen experts' ids (exact in fp32, most probable first), then their k weights
};

/// What a site allows, as named flags a row combines (kReadable | kPoolable, ...).
enum SiteTrait : uint32_t {
  kReadable = 1u << 0,  // --site may name it (read at each decoder layer)
  kRouted = 1u << 1,    // only layers with routed experts have it
  kPoolable = 1u << 2,  // mean and max pooling apply to its rows
  kWritable = 1u << 3,  // writes go there (steering, patching, the noise corruption: model/stream_writes.h)
  kScorable = 1u << 4,  // probes trained on it can score new text (its rows are values, not ids)
};

/// One row of the table.
struct SiteRow {
  Site site;
  const char* name;  // the --site value, the files' attribute, the hook's name
  SiteWidth width;
  uint32_t traits;   // SiteTrait flags
  const char* meaning;

  bool readable() const { return (traits & kReadable) != 0; }
  bool routed() const { return (traits & kRouted) != 0; }
  bool poolable() const { return (traits & kPoolable) != 0; }
  bool writable() const { return (traits & kWritable) != 0; }
  bool scorable() const { return (traits & kScorable) != 0; }
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
