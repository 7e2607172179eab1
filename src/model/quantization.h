// Quantized checkpoints: which quantization_config methods are read (a table, one row per method) and the
// decoding of their stored weights into plain tensors. Quantization is a storage format: the family files name
// tensors as for any checkpoint, and the weight loader (weights.cpp) decodes what it finds.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"

namespace probekit::model {

/// config.json's quantization_config resolved: every method not in the table of read methods is refused by
/// name (bitsandbytes, gptq, awq, compressed-tensors, ...), before any weight is read; `json` is the whole file.
Quantization resolve_quantization(const Json& json, const std::string& source);

/// The float32 value of each of the 256 float8_e4m3fn bytes (1 sign, 4 exponent bits biased by 7, 3 mantissa
/// bits; no infinities, 0x7f and 0xff are NaN).
const at::Tensor& float8_e4m3fn_values();

/// Fine-grained FP8 dequantized: bytes [out, in] of float8_e4m3fn times `scale_inv` [ceil(out / B0),
/// ceil(in / B1)] block by block (the last blocks of a side partial), in float32 on the CPU.
at::Tensor dequantize_fp8_blocks(const at::Tensor& bytes, const at::Tensor& scale_inv, const std::vector<int64_t>& block);

}  // namespace probekit::model
