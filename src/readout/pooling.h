// Turning a layer's hidden states [B, T, hidden] of a right-padded batch into the rows that are stored.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "readout/site_reading.h"

namespace probekit::readout {

/// Rows [B, hidden] in fp32: the last real token, or the mean / max over real tokens after the first
/// `skip_leading` (the BOS a tokenizer puts in front, whose huge norm would swamp a mean).
at::Tensor pool(const at::Tensor& hidden, const at::Tensor& lengths, Position position, int64_t skip_leading);

/// Every real token's row [sum of lengths, hidden] in fp32, example after example.
at::Tensor real_token_rows(const at::Tensor& hidden, const at::Tensor& lengths);

/// [B, longest] bool on `device`: 1 for the tokens each sequence's mask reads (a conversation's --mask); padding
/// and tokens past a mask's end are not read.
at::Tensor read_tokens(const std::vector<std::vector<uint8_t>>& masks, int64_t longest, at::Device device);
/// Rows [B, hidden] in fp32 over the tokens `read` [B, T] marks (each row reads at least one): the last of them, or
/// their mean or max.
at::Tensor pool_read(const at::Tensor& hidden, const at::Tensor& read, Position position);
/// The rows of the tokens `read` marks [count, hidden] in fp32, example after example.
at::Tensor read_token_rows(const at::Tensor& hidden, const at::Tensor& read);

}  // namespace probekit::readout
