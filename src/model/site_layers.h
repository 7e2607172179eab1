// Which layers of a model have a site: the one rule that capture, probes and SAEs all ask, since some sites exist
// only where the architecture has the part they read (a router, a norm before the MLP).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "sites/sites.h"

namespace probekit::model {

/// The layers of `config`'s model that have `site`, ascending: every layer; for a routed site those with a router;
/// for ln2_normalized none on a model whose MLP reads the residual without a norm (OLMo 2 and 3).
std::vector<int64_t> layers_having(Site site, const ModelConfig& config);

/// Why no layer of `config`'s model has `site`, for messages: "has no routed experts, so no layer has a router".
std::string why_no_layer_has(Site site, const ModelConfig& config);

}  // namespace probekit::model
