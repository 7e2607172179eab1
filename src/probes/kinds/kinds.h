// The constructors of the probe kinds, for the registry (registry.cpp) alone.
#pragma once

#include <memory>

#include "probes/probe_kind.h"

namespace probekit::probes {

std::unique_ptr<ProbeKind> make_linear_kind();
std::unique_ptr<ProbeKind> make_multihead_kind();

}  // namespace probekit::probes
