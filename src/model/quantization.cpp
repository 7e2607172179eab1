#include "model/quantization.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "model/routed_experts.h"
#include "model/weights.h"

#ifdef PROBEKIT_WITH_CUDA
#include "model/fused_ops.h"
#endif

namespace probekit::model {

namespace {

// Fine-grained FP8 (DeepSeek V3, Qwen3-*-FP8): e4m3 weights with one inverse scale per block of
// weight_block_size; dequantized on load or per product, or multiplied in FP8 on Hopper GPUs (LoadOptions).
void resolve_fine_grained_fp8(const ConfigReader& keys, Quantization& q) {
  const std::string format = keys.read<std::string>("fmt").value_or("e4m3");
  if (format != "e4m3") fail("{} is '{}'; only 'e4m3' FP8 weights are read", keys.where("fmt"), format);
  Field<std::vector<int64_t>> block = keys.read<std::vector<int64_t>>("weight_block_size");
  if (!block.value) {
    fail("{} is missing: FP8 with one scale per tensor is not read, only fine-grained FP8 with block scales",
         keys.where("weight_block_size"));
  }
  if (block.value->size() != 2 || (*block.value)[0] <= 0 || (*block.value)[1] <= 0) {
    fail("{} must be two positive sizes [out, in], got [{}]", keys.where("weight_block_size"), fmt::join(*block.value, ", "));
  }
  q.block = *block.value;
}

// MXFP4 (gpt-oss): the experts' weights in e2m1 with an e8m0 scale per 32 values; everything the config's
// modules_to_not_convert lists is stored unquantized, so nothing here needs reading.
void resolve_mxfp4(const ConfigReader&, Quantization&) {}

struct QuantizationMethod {
  const char* quant_method;
  void (*resolve)(const ConfigReader& keys, Quantization& quantization);
};

// The methods whose weights the loader reads; any other quant_method is refused.
constexpr QuantizationMethod kReadMethods[] = {
    {"fp8", resolve_fine_grained_fp8},
    {"mxfp4", resolve_mxfp4},
};

}  // namespace

Quantization resolve_quantization(const Json& json, const std::string& source) {
  Quantization quantization;
  Field<ConfigReader> object = ConfigReader(json, source).read<ConfigReader>("quantization_config");
  if (!object.value) return quantization;
  const ConfigReader& keys = *object.value;
  quantization.method = keys.read<std::string>("quant_method").value_or("");
  std::vector<std::string> read_methods;
  for (const QuantizationMethod& method : kReadMethods) {
    if (quantization.method == method.quant_method) {
      method.resolve(keys, quantization);
      return quantization;
    }
    read_methods.emplace_back(method.quant_method);
  }
  fail("{} is '{}': weights quantized this way are not read (read: unquantized weights, and quant_method {}); use "
       "the unquantized checkpoint",
       keys.where("quant_method"), quantization.method, fmt::join(read_methods, ", "));
}

const at::Tensor& float8_e4m3fn_values() {
  static const at::Tensor values = [] {
    at::Tensor table = at::empty({256}, at::kFloat);
    float* out = table.data_ptr<float>();
    for (int byte = 0; byte < 256; ++byte) {
      const int exponent = (byte >> 3) & 0xf, mantissa = byte & 0x7;
      const float magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0f, -6)  // subnormal
                                            : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
      const bool nan = exponent == 0xf && mantissa == 0x7;
      out[byte] = nan ? std::numeric_limits<float>::quiet_NaN() : ((byte & 0x80) != 0 ? -magnitude : magnitude);
    }
    return table;
  }();
  return values;
}

namespace {

// The index of the first true element of `mask` as "i, j" (nonzero's rows need not be contiguous).
std::string first_index(const at::Tensor& mask) {
  at::Tensor first = mask.nonzero()[0].contiguous();
  return fmt::format("{}", fmt::join(first.data_ptr<int64_t>(), first.data_ptr<int64_t>() + first.numel(), ", "));
}

}  // namespace

void check_fp8_scales(const at::Tensor& scale_inv, const std::string& what) {
  const at::Tensor scales = scale_inv.to(at::kFloat);
  const at::Tensor broken = scales.isfinite().logical_not();
  if (broken.any().item<bool>()) {
    fail("{}: the FP8 block scale at [{}] is {}; the checkpoint is damaged", what, first_index(broken),
         scales.masked_select(broken)[0].item<float>());
  }
  const at::Tensor zero = scales.eq(0);
  if (const int64_t zeros = zero.sum().item<int64_t>(); zeros > 0) {
    spdlog::warn("{}: the FP8 block scale at [{}] is 0 ({} of its {} blocks): those weights decode to zeros (no "
                 "published checkpoint has a zero scale: is the checkpoint damaged?)",
                 what, first_index(zero), zeros, scales.numel());
  }
}

at::Tensor fp8_row_scales(const at::Tensor& scale_inv, int64_t rows, int64_t block_rows) {
  return scale_inv.to(at::kFloat).repeat_interleave(block_rows, 0).narrow(0, 0, rows);
}

at::Tensor dequantize_fp8_blocks(const at::Tensor& bytes, const at::Tensor& scale_inv, const std::vector<int64_t>& block) {
  return decode_fp8_rows(bytes, fp8_row_scales(scale_inv, bytes.size(0), block[0]), block[1], at::kFloat);
}

at::Tensor decode_fp8_rows(const at::Tensor& bytes, const at::Tensor& row_scales, int64_t block_in, at::ScalarType dtype) {
#ifdef PROBEKIT_WITH_CUDA
  if (bytes.is_cuda()) return fused::decode_fp8_rows(bytes, row_scales, block_in, dtype);
#endif
  const int64_t out = bytes.size(0), in = bytes.size(1);
  at::Tensor values = float8_e4m3fn_values().to(bytes.device()).index_select(0, bytes.flatten().to(at::kLong)).view({out, in});
  return (values * row_scales.repeat_interleave(block_in, 1).narrow(1, 0, in)).to(dtype);
}

bool fp8_block_products_run_on(const at::Device& device, at::ScalarType dtype) {
#ifdef PROBEKIT_WITH_CUDA
  return (dtype == at::kBFloat16 || dtype == at::kHalf) && fused::fp8_block_products_available(device);
#else
  (void)device, (void)dtype;
  return false;
#endif
}

bool fp8_block_products_take(int64_t out, int64_t in) {
  // cuBLASLt (CUDA 13, an H200) gave wrong block-scaled products for 1 and 2 blocks of inputs, whose weight scales'
  // rows are narrower than 16 bytes: whole groups of 4 blocks only (every projection of the Qwen 3 and DeepSeek V3
  // releases, 1,024 inputs and more).
  return out > 0 && out % 128 == 0 && in > 0 && in % 512 == 0;
}

at::Tensor fp8_block_linear(const at::Tensor& x, const at::Tensor& bytes, const at::Tensor& block_scales) {
#ifdef PROBEKIT_WITH_CUDA
  return fused::fp8_block_linear(x, bytes, block_scales);
#else
  (void)x, (void)bytes, (void)block_scales;
  fail("FP8 products in FP8 need a CUDA build");
#endif
}

const at::Tensor& fp4_e2m1_values() {
  static const at::Tensor values =
      at::tensor({0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f});
  return values;
}

namespace {

// The two values of each of the 256 bytes [256, 2]: the low nibble's first.
const at::Tensor& mxfp4_byte_values() {
  static const at::Tensor pairs = [] {
    at::Tensor bytes = at::arange(256, at::kLong);
    at::Tensor codes = at::stack({bytes.bitwise_and(15), bytes.div(16, "floor")}, -1).flatten();
    return fp4_e2m1_values().index_select(0, codes).view({256, 2});
  }();
  return pairs;
}

// 2^(s - 127) for each e8m0 byte s, exact in float32 (2^-127 is a denormal); 255 is NaN.
const at::Tensor& e8m0_values() {
  static const at::Tensor values = [] {
    at::Tensor table = at::empty({256}, at::kFloat);
    float* out = table.data_ptr<float>();
    for (int byte = 0; byte < 256; ++byte) {
      out[byte] = byte == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, byte - 127);
    }
    return table;
  }();
  return values;
}

}  // namespace

void check_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, const std::string& what) {
  std::vector<int64_t> block_shape = scales.sizes().vec();
  block_shape.push_back(16);
  if (blocks.sizes().vec() != block_shape) {
    fail("{}: MXFP4 blocks of shape [{}] do not match scales of shape [{}] (expected blocks [{}])", what,
         fmt::join(blocks.sizes(), ", "), fmt::join(scales.sizes(), ", "), fmt::join(block_shape, ", "));
  }
  const at::Tensor nan_scales = scales.eq(255);
  if (nan_scales.any().item<bool>()) {
    fail("{}: MXFP4 scale byte 255 at [{}] is NaN in the e8m0 format; the checkpoint is damaged", what, first_index(nan_scales));
  }
}

namespace {

// decode_mxfp4 of blocks [..., G, 16] and scales [..., G] into `out` [..., G * 32] (contiguous) of the decoding
// dtype `exact`.
void decode_mxfp4_into(const at::Tensor& blocks, const at::Tensor& scales, at::Tensor out) {
  const at::ScalarType exact = out.scalar_type();
  at::Tensor values = out.view({-1, 2});  // [bytes, 2]
  at::index_select_out(values, mxfp4_byte_values().to(out.device(), exact), 0, blocks.flatten().to(at::kInt));
  at::Tensor factors = e8m0_values().to(out.device(), exact).index_select(0, scales.flatten().to(at::kInt));
  out.view({-1, 32}).mul_(factors.unsqueeze(-1));
}

}  // namespace

at::Tensor decode_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType dtype, int64_t slice_bytes) {
  std::vector<int64_t> shape = scales.sizes().vec();
  shape.back() *= 32;
#ifdef PROBEKIT_WITH_CUDA
  // One kernel writing the dtype straight from the bytes: the ATen path below made int32 indices, gathered, and
  // copied its lookup tables from the host (a synchronization) for each slice.
  if (blocks.is_cuda()) {
    at::Tensor out = at::empty(shape, blocks.options().dtype(dtype));
    if (fused::decode_mxfp4(blocks, scales, out)) return out;
  }
#endif
  // In bf16 or fp32 throughout: an e2m1 value (two significant bits) times a power of two from 2^-127 to 2^127 is
  // exact in both, so no wider copy of the weights is made; fp16's range is narrower: decoded in fp32, then cast.
  const at::ScalarType exact = dtype == at::kHalf ? at::kFloat : dtype;
  at::Tensor out = at::empty(shape, blocks.options().dtype(exact));
  const int64_t leading = blocks.dim() > 2 ? blocks.size(0) : 1;
  const int64_t per_slice = std::max<int64_t>(1, slice_bytes / std::max<int64_t>(1, blocks.numel() / std::max<int64_t>(leading, 1)));
  if (blocks.dim() <= 2 || per_slice >= leading) {
    decode_mxfp4_into(blocks, scales, out);
  } else {
    for (int64_t start = 0; start < leading; start += per_slice) {
      const int64_t count = std::min(per_slice, leading - start);
      decode_mxfp4_into(blocks.narrow(0, start, count), scales.narrow(0, start, count), out.narrow(0, start, count));
    }
  }
  return out.to(dtype);
}

at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, const std::string& what) {
  check_mxfp4(blocks, scales, what);
  return decode_mxfp4(blocks, scales, at::kFloat);
}

Fp8Weight stacked_fp8_room(const Fp8Weight& first, int64_t count) {
  Fp8Weight room = first;
  room.bytes = at::empty({count, first.bytes.size(0), first.bytes.size(1)}, first.bytes.options());
  room.row_scales = at::empty({count, first.row_scales.size(0), first.row_scales.size(1)}, first.row_scales.options());
  room.block_scales = at::Tensor();
  return room;
}

void put_fp8(Fp8Weight& stacked, int64_t index, const Fp8Weight& part) {
  stacked.bytes[index].copy_(part.bytes);
  stacked.row_scales[index].copy_(part.row_scales);
}

void unpack_fp8_experts(RoutedExperts& routed, int64_t loaded, const at::TensorOptions& options) {
  const auto decoded = [&](const Fp8Weight& w, int64_t e) {
    return decode_fp8_rows(w.bytes[e], w.row_scales[e], w.block_in, options.dtype().toScalarType());
  };
  routed.gate_up = at::empty(routed.gate_up_fp8.bytes.sizes(), options);
  routed.down = at::empty(routed.down_fp8.bytes.sizes(), options);
  for (int64_t e = 0; e < loaded; ++e) {
    routed.gate_up[e].copy_(decoded(routed.gate_up_fp8, e)), routed.down[e].copy_(decoded(routed.down_fp8, e));
  }
  routed.gate_up_fp8 = Fp8Weight(), routed.down_fp8 = Fp8Weight();
}

}  // namespace probekit::model
