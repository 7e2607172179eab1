// Quantized checkpoints: which quantization_config methods are read (a table, one row per method) and the
// decoding of their stored weights into plain tensors. Quantization is a storage format: the family files name
// tensors as for any checkpoint, and the weight loader (weight_scope.cpp) decodes what it finds; routed experts kept
// packed are stacked here too.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"

namespace probekit::model {

struct Fp8Weight;
struct RoutedExperts;

/// config.json's quantization_config resolved: every method not in the table of read methods is refused by
/// name (bitsandbytes, gptq, awq, compressed-tensors, ...), before any weight is read; `json` is the whole file.
Quantization resolve_quantization(const Json& json, const std::string& source);

/// The float32 value of each of the 256 float8_e4m3fn bytes (1 sign, 4 exponent bits biased by 7, 3 mantissa
/// bits; no infinities, 0x7f and 0xff are NaN).
const at::Tensor& float8_e4m3fn_values();

/// Fine-grained FP8 dequantized: bytes [out, in] of float8_e4m3fn times `scale_inv` [ceil(out / B0),
/// ceil(in / B1)] block by block (the last blocks of a side partial), in float32 on the CPU.
at::Tensor dequantize_fp8_blocks(const at::Tensor& bytes, const at::Tensor& scale_inv, const std::vector<int64_t>& block);

/// Checks fine-grained FP8 block scales read from a checkpoint (`what` names the tensor and its file): a scale
/// that is NaN or infinite is refused naming its block; a scale of zero, which turns its block into zeros and which
/// no published checkpoint has, is warned about naming the first such block and how many there are.
void check_fp8_scales(const at::Tensor& scale_inv, const std::string& what);

/// Block scales `scale_inv` [ceil(rows / block_rows), C] as one fp32 row per weight row [rows, C].
at::Tensor fp8_row_scales(const at::Tensor& scale_inv, int64_t rows, int64_t block_rows);

/// Fine-grained FP8 with its scales expanded to rows: bytes [out, in] uint8 times `row_scales` [out,
/// ceil(in / block_in)] fp32 (one per block of block_in inputs, the last partial), rounded once into `dtype` on
/// their device: the bits of dequantize_fp8_blocks converted to `dtype`. A CUDA kernel on a GPU.
at::Tensor decode_fp8_rows(const at::Tensor& bytes, const at::Tensor& row_scales, int64_t block_in, at::ScalarType dtype);

/// Whether FP8 weights multiply in FP8 on `device` computing in `dtype` (fused::fp8_block_linear): a Hopper GPU
/// (cuBLASLt's block-scaled FP8 products) and bf16 or fp16; false in a build without CUDA.
bool fp8_block_products_run_on(const at::Device& device, at::ScalarType dtype);

/// Whether a weight [out, in] multiplies in FP8: whole 128-wide blocks of outputs, whole groups of 4 blocks of inputs.
bool fp8_block_products_take(int64_t out, int64_t in);

/// x [..., in] times an FP8 weight `bytes` [out, in] with `block_scales` [out / 128, in / 128], in FP8 on the GPU
/// (fused::fp8_block_linear); only where fp8_block_products_run_on said so.
at::Tensor fp8_block_linear(const at::Tensor& x, const at::Tensor& bytes, const at::Tensor& block_scales);

/// The 16 values of the FP4 e2m1 codes (1 sign bit, 2 exponent bits biased by 1, 1 mantissa bit):
/// 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0).
const at::Tensor& fp4_e2m1_values();

/// Checks an MXFP4 weight's `blocks` [..., G, 16] against its `scales` [..., G] and refuses a scale byte 255 (NaN
/// in the OCP e8m0 format), naming `what` and where.
void check_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, const std::string& what);

/// MXFP4 decoded, unchecked: `blocks` [..., G, 16] uint8, each byte two e2m1 values (the low nibble first), and
/// `scales` [..., G] uint8, e8m0 exponents (2^(s - 127)) each scaling a group of 32 values, into [..., G * 32] in
/// `dtype` on their device. The values are exact in float32 and rounded once into `dtype`. Decoded a slice of the
/// leading dimension (an expert) at a time, each at most `slice_bytes` of blocks where it can be: a layer's experts
/// at once took their int32 byte indices and values beside the output, gigabytes only the peak memory saw.
at::Tensor decode_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType dtype,
                        int64_t slice_bytes = int64_t{64} << 20);

/// check_mxfp4, then decode_mxfp4 into float32.
at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, const std::string& what);

/// Room for `count` packed FP8 weights shaped as `first`, stacked [count, ...] (routed experts: their products decode
/// their weights, so no block scales are kept).
Fp8Weight stacked_fp8_room(const Fp8Weight& first, int64_t count);
/// Copies `part` into entry `index` of `stacked`.
void put_fp8(Fp8Weight& stacked, int64_t index, const Fp8Weight& part);
/// The first `loaded` experts of `routed`, kept packed so far, decoded into its dense stacked weights (an expert
/// after them is not in FP8); the packed weights are dropped.
void unpack_fp8_experts(RoutedExperts& routed, int64_t loaded, const at::TensorOptions& options);

}  // namespace probekit::model
