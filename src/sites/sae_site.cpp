#include "sites/sae_site.h"

#include "common/error.h"

namespace probekit {

namespace {

constexpr const char* kLatentsPrefix = "sae:";
constexpr const char* kErrorPrefix = "sae-error:";

}  // namespace

std::string SaeSite::text() const { return (output == SaeOutput::kError ? kErrorPrefix : kLatentsPrefix) + name; }

std::optional<SaeSite> parse_sae_site(const std::string& text) {
  for (const SaeOutput output : {SaeOutput::kLatents, SaeOutput::kError}) {
    const std::string prefix = output == SaeOutput::kError ? kErrorPrefix : kLatentsPrefix;
    if (text.compare(0, prefix.size(), prefix) != 0) continue;
    SaeSite site{text.substr(prefix.size()), output};
    if (site.name.empty()) fail_usage("--site {}: name the SAE after '{}' (the NAME of --sae NAME=PATH)", text, prefix);
    return site;
  }
  return std::nullopt;
}

}  // namespace probekit
