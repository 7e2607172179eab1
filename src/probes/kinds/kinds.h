// The constructors of the probe kinds, for the registry (registry.cpp) alone.
#pragma once

#include <memory>

#include "probes/probe_kind.h"

namespace probekit::probes {

std::unique_ptr<ProbeKind> make_linear_kind();
std::unique_ptr<ProbeKind> make_multihead_kind();
std::unique_ptr<ProbeKind> make_logistic_kind();
std::unique_ptr<ProbeKind> make_mean_diff_kind();
std::unique_ptr<ProbeKind> make_attention_kind();
std::unique_ptr<ProbeKind> make_ema_kind();
std::unique_ptr<ProbeKind> make_rolling_kind();
std::unique_ptr<ProbeKind> make_multimax_kind();
std::unique_ptr<ProbeKind> make_sparse_logistic_kind();

}  // namespace probekit::probes
