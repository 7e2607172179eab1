// sweep.html: the sweep's report as one self-contained page (no network): for each label, its dose-response curve
// (the label's probe score against the coefficient, with the band the other labels' scores span) and its fluency cost
// (KL from the unsteered model), then the generated texts per coefficient and prompt.
#pragma once

#include <string>

#include "common/json.h"

namespace probekit::sweep {

/// The page for a sweep.json document.
std::string render_sweep_report(const Json& sweep);

}  // namespace probekit::sweep
