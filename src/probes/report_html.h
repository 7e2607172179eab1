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

/// A table cell of `value` with its interval in brackets, sortable by the value.
std::string figure_cell(double value, const metrics::Interval& ci95);

/// A self-contained page titled `title`: the reports' style and table-sorting script around `body` (HTML).
std::string html_page(const std::string& title, const std::string& body);

}  // namespace probekit::probes
