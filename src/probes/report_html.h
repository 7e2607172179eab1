// report.html of a train_binary_probes run: one self-contained page (inline CSS, SVG and a few lines of JS;
// nothing fetched from the network) with per-label AUROC and F1 bars, validation AUROC curves, a sortable
// table, and for several layers a label x layer heatmap of test AUROC.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "probes/binary_trainer.h"

namespace probekit::probes {

/// The page for the layers of one run; `config` (flag values, device, dtype...) is shown as a table.
std::string render_binary_report(const std::vector<LayerOutcome>& layers, const Json& config);

}  // namespace probekit::probes
