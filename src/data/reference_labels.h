// The reference dataset's label set: its 45 cognitive actions in sorted order, which the label indices of its
// activation files refer to.
#pragma once

#include <string>
#include <vector>

namespace probekit::data {

/// The reference's 45 label names, sorted; label i of a reference file is the i-th.
const std::vector<std::string>& reference_label_names();

}  // namespace probekit::data
