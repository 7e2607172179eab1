#include "model/quantization.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "common/error.h"

namespace probekit::model {

namespace {

// Fine-grained FP8 (DeepSeek V3, Qwen3-*-FP8): e4m3 weights with one inverse scale per block of
// weight_block_size; activations stay in the compute dtype (the weights are dequantized on load).
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

struct QuantizationMethod {
  const char* quant_method;
  void (*resolve)(const ConfigReader& keys, Quantization& quantization);
};

// The methods whose weights the loader reads; any other quant_method is refused.
constexpr QuantizationMethod kReadMethods[] = {
    {"fp8", resolve_fine_grained_fp8},
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

at::Tensor dequantize_fp8_blocks(const at::Tensor& bytes, const at::Tensor& scale_inv, const std::vector<int64_t>& block) {
  const int64_t out = bytes.size(0), in = bytes.size(1);
  at::Tensor values = float8_e4m3fn_values().index_select(0, bytes.flatten().to(at::kLong)).view({out, in});
  at::Tensor scales = scale_inv.to(at::kFloat)
                          .repeat_interleave(block[0], 0)
                          .repeat_interleave(block[1], 1)
                          .narrow(0, 0, out)
                          .narrow(1, 0, in);
  return values * scales;
}

}  // namespace probekit::model
