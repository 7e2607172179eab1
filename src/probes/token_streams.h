// What a monitor compares at every token, read back from a --position all capture of ordinary conversations: each
// token's own score where the probes have one (a per-row probe of position last reads each prefix's last row, which
// is that token's; ema and rolling probes score each token), else the probes' score of the text up to the token
// (multimax, attention). Calibration takes each conversation's highest: a threshold on it flags at most its share of
// conversations whatever a monitor aggregates (token and max compare the stream as it is; the ema and rolling
// aggregates, and an ema or rolling probe's own score of the text so far, are weighted means of it, never above its
// highest).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "activations/activation_store.h"
#include "probes/probe_files.h"

namespace probekit::probes {

/// Why `file` holds no per-token stream for `set`'s probes ("" when it does): it must hold every token (--position
/// all) of texts the probes read without a prompt suffix (a monitor's token is scored as the text up to it, not
/// followed by the suffix a capture puts after the whole text), and per-row probes must read the last token.
std::string token_stream_problem(const ProbeSet& set, const activations::ActivationFile& file);

/// Each example's highest per-token probability [examples, K] (fp32, as inference compares), examples in file order
/// (train, val, test). The file must have no token_stream_problem.
at::Tensor token_stream_maxima(const ProbeSet& set, const activations::ActivationFile& file);

}  // namespace probekit::probes
