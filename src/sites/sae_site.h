// The sites an SAE adds (--site sae:NAME, sae-error:NAME): its latents at its own site and layer, or the part of the
// site's values it misses (x - reconstruction). Named by the SAE's name given with --sae NAME=PATH.
#pragma once

#include <optional>
#include <string>

namespace probekit {

enum class SaeOutput {
  kLatents,  // sae:NAME, the latents
  kError,    // sae-error:NAME, x - reconstruction
};

struct SaeSite {
  std::string name;  // the SAE's name
  SaeOutput output = SaeOutput::kLatents;

  /// As --site takes it: "sae:NAME" or "sae-error:NAME".
  std::string text() const;
};

/// The SAE site `text` names ("sae:NAME", "sae-error:NAME"); nullopt for any other site's name. An empty NAME is a
/// usage error.
std::optional<SaeSite> parse_sae_site(const std::string& text);

}  // namespace probekit
