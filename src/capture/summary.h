// What capture_activations prints when it is done: a JSON summary (--json) or a few lines for people.
#pragma once

#include <string>

#include "capture/capture_options.h"
#include "common/json.h"

namespace probekit::capture {

/// The --json summary of a run.
Json summary_json(const CaptureSummary& summary);
/// The closing lines for people: what was captured, how fast, the files, cuts and skipped lines.
std::string summary_text(const CaptureSummary& summary, int64_t max_length);

}  // namespace probekit::capture
