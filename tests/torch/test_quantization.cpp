// Quantized weights decoded on load: float8_e4m3fn bytes by hand, and block scales with partial edge blocks.
#include <doctest/doctest.h>

#include <cmath>

#include "model/quantization.h"

using namespace probekit;

TEST_CASE("float8_e4m3fn bytes decode to their values") {
  const at::Tensor& values = model::float8_e4m3fn_values();
  auto value = [&](int byte) { return values[byte].item<float>(); };
  CHECK(value(0x00) == 0.0f);
  CHECK(value(0x38) == 1.0f);             // exponent 7 (bias 7), mantissa 0: 2^0
  CHECK(value(0x3c) == 1.5f);             // mantissa 4/8
  CHECK(value(0xc0) == -2.0f);            // sign, exponent 8
  CHECK(value(0x7e) == 448.0f);           // the largest: 2^8 * (1 + 6/8)
  CHECK(value(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal: 1/8 * 2^-6
  CHECK(value(0x08) == std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(std::isnan(value(0x7f)));
  CHECK(std::isnan(value(0xff)));
}

TEST_CASE("fine-grained FP8 scales each block, the last ones partial") {
  // A [3, 5] weight of 1.0 (0x38) in 2x2 blocks: scales [2, 3], the last row and column of blocks partial.
  at::Tensor bytes = at::full({3, 5}, 0x38, at::kByte);
  at::Tensor scales = at::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).view({2, 3});
  at::Tensor weight = model::dequantize_fp8_blocks(bytes, scales, {2, 2});
  at::Tensor expected = at::tensor({1.0f, 1.0f, 2.0f, 2.0f, 3.0f,  //
                                    1.0f, 1.0f, 2.0f, 2.0f, 3.0f,  //
                                    4.0f, 4.0f, 5.0f, 5.0f, 6.0f})
                            .view({3, 5});
  CHECK(weight.equal(expected));
}
