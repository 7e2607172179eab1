// How a site (the table in sites/sites.h) is read from a model: which token positions become rows, the width of a
// site's rows and the layers that have it. Capture, inference and every later reader ask these, never the site's name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "sites/positions.h"
#include "sites/sites.h"

namespace probekit::readout {

/// The values of one row at `site` of `config`'s model (SiteWidth).
int64_t site_width(Site site, const model::ModelConfig& config);
/// What that width is, for messages: "the model in DIR has hidden size 64", "the routers of the model in DIR score
/// 8 experts", ...
std::string site_width_described(Site site, const model::ModelConfig& config, const std::string& model_dir);
/// Refuses, as a usage error, a site on a model without any layer that has it (model::layers_having: routed sites
/// without routed experts, ln2_normalized without a pre-MLP norm), routed sites on layers without a router (naming
/// the layers that have one), and pooling a site that cannot be pooled (mean or max: only last or all).
void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config);

}  // namespace probekit::readout
