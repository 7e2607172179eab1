// Turning a layer's hidden states [B, T, hidden] of a right-padded batch into the rows that are stored.
#pragma once

#include <ATen/ATen.h>

#include "readout/site_reading.h"

namespace probekit::readout {

/// Rows [B, hidden] in fp32: the last real token, or the mean / max over real tokens after the first
/// `skip_leading` (the BOS a tokenizer puts in front, whose huge norm would swamp a mean).
at::Tensor pool(const at::Tensor& hidden, const at::Tensor& lengths, Position position, int64_t skip_leading);

/// Every real token's row [sum of lengths, hidden] in fp32, example after example.
at::Tensor real_token_rows(const at::Tensor& hidden, const at::Tensor& lengths);

}  // namespace probekit::readout
