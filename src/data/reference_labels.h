// The reference dataset's label set: its 45 cognitive actions in sorted order, which the label indices of its
// activation files refer to.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace probekit::data {

/// The reference's 45 label names, sorted; label i of a reference file is the i-th.
const std::vector<std::string>& reference_label_names();

/// Whether a dataset is one of the reference's cognitive-action datasets, whose labels the reference indexes
/// in reference_label_names() whatever subset the file holds: the label field is cognitive_action and every one
/// of `labels` is among the 45.
bool uses_reference_label_names(const std::string& label_field, const std::set<std::string>& labels);

}  // namespace probekit::data
