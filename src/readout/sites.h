// Where in a forward pass activations are read (the site, in TransformerLens' naming, plus the router of a
// layer with routed experts) and which token positions become rows. Capture, inference and every later
// reader name what they want with these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace probekit::readout {

/// Where in a decoder layer activations are read. kRouter: the router's logits before the softmax, one per
/// expert. kExperts: the experts the router chose and their weights; a row holds the k chosen ids (exact in
/// fp32, most probable first) then their k weights.
enum class Site { kResidPost, kResidPre, kResidMid, kAttnOut, kMlpOut, kRouter, kExperts };
/// Which token positions become rows.
enum class Position { kLast, kMean, kMax, kAll };

/// Parses --site; an unknown name is a usage error listing the sites.
Site parse_site(const std::string& name);
/// Parses --position; an unknown name is a usage error listing the positions.
Position parse_position(const std::string& name);
/// The name of a site ("resid_post"): the flag's value and the files' attribute; for the residual sites also
/// the decoder's hook name.
const char* site_name(Site site);
std::string position_name(Position position);

/// The values of one row at `site` of `config`'s model: the hidden size, the number of experts (router), or
/// 2 k (experts: ids then weights).
int64_t site_width(Site site, const model::ModelConfig& config);
/// Refuses, as a usage error, router and expert sites on a model without routed experts or on layers without
/// a router (naming the layers that have one), and pooling expert ids (mean or max: only last or all).
void check_site(Site site, Position position, const std::vector<int64_t>& layers, const model::ModelConfig& config);

}  // namespace probekit::readout
