// What the training tools print on stdout when --json is not given: the figures of their --json summaries
// (run_binary_training's and run_multiclass_training's), as a few lines and a table a person reads.
#pragma once

#include <string>

#include "common/json.h"

namespace probekit::probes {

/// train_binary_probes' summary: where the probes went, a line per layer (probes, mean test AUROC, mean F1 at 0.5
/// and at the tuned thresholds, labels skipped, seconds), the best layer and the report; with several kinds, one
/// table per kind and the comparison's files.
std::string binary_summary_text(const Json& summary);

/// train_probes' summary: where the probe went, its classes and test figures, and its best epoch.
std::string multiclass_summary_text(const Json& summary);

}  // namespace probekit::probes
