// Where in a forward pass activations are read (the site, in TransformerLens' naming) and which token
// positions become rows. Capture, inference and every later reader name what they want with these.
#pragma once

#include <cstdint>
#include <string>

namespace probekit::readout {

/// Where in a decoder layer activations are read.
enum class Site { kResidPost, kResidPre, kResidMid, kAttnOut, kMlpOut };
/// Which token positions become rows.
enum class Position { kLast, kMean, kMax, kAll };

/// Parses --site; an unknown name is a usage error listing the sites.
Site parse_site(const std::string& name);
/// Parses --position; an unknown name is a usage error listing the positions.
Position parse_position(const std::string& name);
/// The name of a site ("resid_post"): the flag's value, the files' attribute and the decoder's hook name.
const char* site_name(Site site);
std::string position_name(Position position);

}  // namespace probekit::readout
