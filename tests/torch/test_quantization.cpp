// Quantized weights decoded on load: float8_e4m3fn bytes by hand, block scales with partial edge blocks (checked for
// NaN, infinite and zero scales), MXFP4 codes and scales.
#include <doctest/doctest.h>

#include <cmath>

#include "model/quantization.h"
#include "model/weights.h"
#include "test_util.h"

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

namespace {

// A packed FP8 weight [rows, 40] of random finite codes in blocks of 128 rows (partial at the edge), its block scales
// kept where `block_scaled`, with a bias.
model::Linear random_fp8_linear(int64_t rows, bool block_scaled) {
  model::Linear l;
  at::Tensor codes = at::randint(0, 0x7e, {rows, 40}, at::kLong);
  l.fp8.bytes = (codes + at::randint(0, 2, {rows, 40}, at::kLong) * 0x80).to(at::kByte);  // either sign, never NaN
  at::Tensor scale_inv = at::rand({(rows + 127) / 128, 1}) + 0.5;
  l.fp8.row_scales = model::fp8_row_scales(scale_inv, rows, 128);
  l.fp8.block_in = 128;
  if (block_scaled) l.fp8.block_scales = scale_inv;
  l.bias = at::randn({rows});
  return l;
}

}  // namespace

TEST_CASE("packed FP8 rows selected and stacked decode to the dense weight's rows, block scales kept only in place") {
  const model::Linear l = random_fp8_linear(384, true);
  // Rows reversed within each 128-row block keep their blocks; rows moved across blocks lose the block scales.
  const at::Tensor within = at::cat({at::arange(127, -1, -1, at::kLong), at::arange(255, 127, -1, at::kLong),
                                     at::arange(383, 255, -1, at::kLong)});
  const at::Tensor across = at::cat({at::arange(100, 384, at::kLong), at::arange(0, 100, at::kLong)});
  for (const at::Tensor& order : {within, across}) {
    const model::Linear selected = model::rows_selected(l, order);
    CHECK(selected.dense_weight().equal(l.dense_weight().index_select(0, order)));
    CHECK(selected.bias.equal(l.bias.index_select(0, order)));
  }
  CHECK(model::rows_selected(l, within).fp8.block_scales.equal(l.fp8.block_scales));
  CHECK_FALSE(model::rows_selected(l, across).fp8.block_scales.defined());
  // The second block alone: its scales alone; half of a block: none.
  CHECK(model::rows_selected(l, at::arange(128, 256, at::kLong)).fp8.block_scales.equal(l.fp8.block_scales.narrow(0, 1, 1)));
  CHECK_FALSE(model::rows_selected(l, at::arange(0, 64, at::kLong)).fp8.block_scales.defined());

  const model::Linear second = random_fp8_linear(128, true), dense = {at::randn({10, 40}), {}, {}};
  const model::Linear both = model::stacked({l, second});
  CHECK(both.fp8.defined());
  CHECK(both.dense_weight().equal(at::cat({l.dense_weight(), second.dense_weight()})));
  CHECK(both.fp8.block_scales.equal(at::cat({l.fp8.block_scales, second.fp8.block_scales})));
  const model::Linear mixed = model::stacked({l, dense});  // a dense part: every part decoded
  CHECK_FALSE(mixed.fp8.defined());
  CHECK(mixed.weight.equal(at::cat({l.dense_weight(), dense.weight})));
}

TEST_CASE("MXFP4 bytes decode low nibble first, scaled by 2^(s - 127); a NaN scale is refused with its place") {
  const at::Tensor& codes = model::fp4_e2m1_values();
  CHECK(codes.equal(at::tensor({0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f,
                                -4.0f, -6.0f})));
  CHECK(std::signbit(codes[8].item<float>()));  // code 8 is -0
  // Two groups of 32 values (one row, 64 inputs): group 0 scale 127 (x1), group 1 scale 128 (x2).
  at::Tensor blocks = at::zeros({1, 2, 16}, at::kByte);
  blocks[0][0][0] = 0x21;  // values 0 and 1: code 1 (0.5) in the low nibble, code 2 (1.0) in the high one
  blocks[0][0][1] = 0xf8;  // values 2 and 3: -0 and -6
  blocks[0][1][15] = 0x7f;  // values 62 and 63 of the row: -6 and 6, times 2
  at::Tensor scales = at::tensor({127, 128}, at::kByte).view({1, 2});
  at::Tensor weight = model::dequantize_mxfp4(blocks, scales, "test");
  REQUIRE(weight.sizes() == at::IntArrayRef({1, 64}));
  CHECK(weight[0][0].item<float>() == 0.5f);
  CHECK(weight[0][1].item<float>() == 1.0f);
  CHECK(weight[0][2].item<float>() == 0.0f);
  CHECK(std::signbit(weight[0][2].item<float>()));
  CHECK(weight[0][3].item<float>() == -6.0f);
  CHECK(weight[0][62].item<float>() == -12.0f);
  CHECK(weight[0][63].item<float>() == 12.0f);
  CHECK(weight.abs().sum().item<float>() == 0.5f + 1.0f + 6.0f + 24.0f);
  // The smallest scale, 2^-127, is a float32 denormal and stays exact.
  at::Tensor tiny = model::dequantize_mxfp4(blocks.narrow(1, 0, 1), at::zeros({1, 1}, at::kByte), "test");
  CHECK(tiny[0][1].item<float>() == std::ldexp(1.0f, -127));

  scales[0][1] = 255;
  CHECK_THROWS_WITH_AS(model::dequantize_mxfp4(blocks, scales, "weight 'w' in f"),
                       doctest::Contains("weight 'w' in f: MXFP4 scale byte 255 at [0, 1] is NaN"), std::runtime_error);
  CHECK_THROWS_WITH_AS(model::dequantize_mxfp4(blocks.narrow(2, 0, 8), scales, "w"), doctest::Contains("do not match scales"),
                       std::runtime_error);
}

TEST_CASE("MXFP4 experts decoded a slice at a time give the bits of all at once, in every dtype") {
  // 5 experts of [6 rows, 2 groups]: slices of 2 experts (the last one alone) against one decode of all five.
  at::Tensor blocks = at::randint(0, 256, {5, 6, 2, 16}, at::kLong).to(at::kByte);
  at::Tensor scales = at::randint(100, 140, {5, 6, 2}, at::kLong).to(at::kByte);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    at::Tensor whole = model::decode_mxfp4(blocks, scales, dtype);
    at::Tensor sliced = model::decode_mxfp4(blocks, scales, dtype, 2 * 6 * 2 * 16);
    CHECK((whole.sizes().vec() == std::vector<int64_t>{5, 6, 64}));
    CHECK(static_cast<int>(whole.scalar_type()) == static_cast<int>(dtype));
    CHECK(at::equal(sliced, whole));
    CHECK(at::equal(whole.to(at::kFloat), model::decode_mxfp4(blocks, scales, at::kFloat).to(dtype).to(at::kFloat)));
  }
}

TEST_CASE("FP8 block scales: NaN or infinite ones are refused naming the block; zero ones are warned about") {
  at::Tensor scales = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2});
  model::check_fp8_scales(scales, "'w_scale_inv' in f");
  scales[1][0] = std::nanf("");
  CHECK_THROWS_WITH_AS(model::check_fp8_scales(scales, "'w_scale_inv' in f"),
                       "'w_scale_inv' in f: the FP8 block scale at [1, 0] is nan; the checkpoint is damaged", std::runtime_error);
  scales[1][0] = INFINITY;
  CHECK_THROWS_WITH_AS(model::check_fp8_scales(scales.to(at::kBFloat16), "w"), doctest::Contains("at [1, 0] is inf"),
                       std::runtime_error);
  scales[1][0] = 0.0f;
  scales[1][1] = 0.0f;
  testing::LoggedLines log;
  model::check_fp8_scales(scales, "'w_scale_inv' in f");
  CHECK_CONTAINS(log.text(), "'w_scale_inv' in f: the FP8 block scale at [1, 0] is 0 (2 of its 4 blocks): those weights decode "
                             "to zeros");
}
