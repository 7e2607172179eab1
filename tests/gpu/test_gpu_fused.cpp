// The fused CUDA kernels against the same arithmetic in ATen ops, on odd sizes and every float dtype.
#include <doctest/doctest.h>

#include <c10/core/InferenceMode.h>

#include <cmath>

#include "gpu/gpu_test_util.h"
#include "model/fused_ops.h"
#include "model/gated_delta_net.h"
#include "model/quantization.h"
#include "model/weights.h"

using namespace probekit::model;
using probekit::testing::max_relative_error;

namespace {

// The model's functions take the fused kernels only with gradients off (with autograd on, as attribution patching
// runs them, the ATen ops take over), so each case runs as a pass does, in inference mode.
struct KernelsServe {
  c10::InferenceMode inference_mode;
};

const at::TensorOptions kCuda = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);

at::Tensor rms(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  return x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps) * weight;
}

}  // namespace

TEST_CASE_FIXTURE(KernelsServe, "fused rms_norm and residual_add equal the ATen arithmetic") {
  // Widths a multiple of 4 take the kernel holding the row in registers (2, 4, 8 or 16 quads a thread: 2560 and
  // 9000 take 2 and 8, 24576 and 32768 16 in blocks of 384 and 512 threads, which could not launch before the
  // kernels' launch bounds); 333 the plain one; 40000 is past the register kernel's widest row.
  for (int64_t width : {64, 333, 2560, 9000, 24576, 32768, 40000}) {
    CAPTURE(width);
    at::Tensor x = at::randn({7, 5, width}, kCuda), weight = at::randn({width}, kCuda) + 1;
    for (at::ScalarType out : {at::kFloat, at::kBFloat16, at::kHalf}) {
      double tolerance = out == at::kFloat ? 1e-5 : 1e-2;
      CHECK(max_relative_error(fused::rms_norm(x, weight, 1e-6, out), rms(x, weight, 1e-6)) < tolerance);
      CHECK(max_relative_error(fused::rms_norm(x.to(out), weight, 1e-6, at::kFloat), rms(x.to(out), weight, 1e-6)) < 1e-5);
    }
    at::Tensor branch_weight = at::randn({width}, kCuda), norm_weight = at::randn({width}, kCuda);
    for (at::ScalarType branch_type : {at::kBFloat16, at::kFloat}) {
      at::Tensor branch = at::randn({7, 5, width}, kCuda).to(branch_type);
      auto [sum, normed] = fused::residual_add(x, {{branch, branch_weight}}, norm_weight, 1e-6, at::kFloat);
      at::Tensor expected = x + rms(branch, branch_weight, 1e-6);
      CHECK(max_relative_error(sum, expected) < 1e-5);
      CHECK(max_relative_error(normed, rms(expected, norm_weight, 1e-6)) < 1e-5);
      auto [same_sum, normed_bf16] = fused::residual_add(x, {{branch, branch_weight}}, norm_weight, 1e-6, at::kBFloat16);
      CHECK(max_relative_error(normed_bf16, rms(expected, norm_weight, 1e-6)) < 1e-2);
      // A model split over devices normalizes the sum in rms_norm at a stage boundary: the same bits.
      CHECK(at::equal(fused::rms_norm(same_sum, norm_weight, 1e-6, at::kBFloat16), normed_bf16));
      CHECK(at::equal(fused::rms_norm(sum, norm_weight, 1e-6, at::kFloat), normed));
    }
    at::Tensor branch = at::randn({7, 5, width}, kCuda).to(at::kBFloat16);
    auto [plain, none] = fused::residual_add(x, {{branch, at::Tensor()}}, at::Tensor(), 1e-6, at::kBFloat16);
    CHECK(max_relative_error(plain, x + branch.to(at::kFloat)) < 1e-6);
    CHECK_FALSE(none.defined());
  }
}

TEST_CASE_FIXTURE(KernelsServe, "fused residual_add of two branches gives the bits of two adds of one") {
  // 2560, 9000 and 32768 take the register kernel, which adds both in one pass; 333 (the plain kernel) and branches
  // of two dtypes write the first sum and add the second to it.
  for (int64_t width : {333, 2560, 9000, 32768}) {
    for (at::ScalarType second_type : {at::kBFloat16, at::kFloat}) {
      CAPTURE(width);
      CAPTURE(second_type);
      at::Tensor x = at::randn({6, 7, width}, kCuda);
      at::Tensor first = at::randn({6, 7, width}, kCuda).to(at::kBFloat16);
      at::Tensor second = at::randn({6, 7, width}, kCuda).to(second_type);
      at::Tensor first_weight = at::randn({width}, kCuda), second_weight = at::randn({width}, kCuda);
      at::Tensor norm_weight = at::randn({width}, kCuda);
      for (bool second_normed : {false, true}) {
        const at::Tensor weight = second_normed ? second_weight : at::Tensor();
        auto [middle, unused] = fused::residual_add(x, {{first, first_weight}}, at::Tensor(), 1e-6, at::kBFloat16);
        auto [sum, normed] = fused::residual_add(middle, {{second, weight}}, norm_weight, 1e-6, at::kBFloat16);
        auto [both_sum, both_normed] =
            fused::residual_add(x, {{first, first_weight}, {second, weight}}, norm_weight, 1e-6, at::kBFloat16);
        CHECK(at::equal(both_sum, sum));
        CHECK(at::equal(both_normed, normed));
        CHECK(max_relative_error(sum, x + rms(first, first_weight, 1e-6) +
                                          (second_normed ? rms(second, second_weight, 1e-6) : second.to(at::kFloat))) < 1e-5);
      }
      // The first add of a layer whose residual nobody reads between its branches writes its normalized input only.
      auto [no_sum, mlp_input] = fused::residual_add(x, {{first, first_weight}}, norm_weight, 1e-6, at::kBFloat16, false);
      CHECK(no_sum.defined() == (width == 333));
      CHECK(at::equal(mlp_input, fused::residual_add(x, {{first, first_weight}}, norm_weight, 1e-6, at::kBFloat16).second));
    }
  }
}

TEST_CASE_FIXTURE(KernelsServe, "fused residual_add and rms_norm give a row the same bits in a pass of few rows or many") {
  // Up to 256 rows of up to 4 quads a thread hold every operand in registers before the reductions (a decode step);
  // more rows read the weights where they are used (capture): the arithmetic is the same.
  for (int64_t width : {2560, 8192}) {
    CAPTURE(width);
    at::Tensor x = at::randn({300, width}, kCuda);
    at::Tensor first = at::randn({300, width}, kCuda).to(at::kBFloat16);
    at::Tensor second = at::randn({300, width}, kCuda).to(at::kBFloat16);
    at::Tensor first_weight = at::randn({width}, kCuda), second_weight = at::randn({width}, kCuda);
    at::Tensor norm_weight = at::randn({width}, kCuda);
    auto add = [&](int64_t rows) {
      return fused::residual_add(x.narrow(0, 0, rows), {{first.narrow(0, 0, rows), first_weight},
                                                        {second.narrow(0, 0, rows), second_weight}},
                                 norm_weight, 1e-6, at::kBFloat16);
    };
    auto [many_sum, many_normed] = add(300);
    auto [few_sum, few_normed] = add(13);
    CHECK(at::equal(few_sum, many_sum.narrow(0, 0, 13)));
    CHECK(at::equal(few_normed, many_normed.narrow(0, 0, 13)));
    CHECK(at::equal(fused::rms_norm(x.narrow(0, 0, 13), norm_weight, 1e-6, at::kBFloat16),
                    fused::rms_norm(x, norm_weight, 1e-6, at::kBFloat16).narrow(0, 0, 13)));
  }
}

TEST_CASE_FIXTURE(KernelsServe, "fused gated activations equal act(gate) * up") {
  // 1000 and 5000 columns take the row kernel with vector accesses (5000: several blocks a row, the last partial);
  // 999 the element-wise one.
  for (int64_t inner : {1000, 999, 5000}) {
    CAPTURE(inner);
    at::Tensor gate_up = at::randn({3, 9, 2 * inner}, kCuda);
    auto halves = gate_up.chunk(2, -1);
    CHECK(max_relative_error(fused::gated_activation(gate_up, Activation::kSilu), at::silu(halves[0]) * halves[1]) < 1e-5);
    CHECK(max_relative_error(fused::gated_activation(gate_up, Activation::kGeluTanh), at::gelu(halves[0], "tanh") * halves[1]) < 1e-5);
    CHECK(max_relative_error(fused::gated_activation(gate_up, Activation::kGeluExact), at::gelu(halves[0]) * halves[1]) < 1e-5);
    at::Tensor bf16 = gate_up.to(at::kBFloat16);
    auto bf16_halves = bf16.chunk(2, -1);
    CHECK(max_relative_error(fused::gated_activation(bf16, Activation::kGeluTanh),
                    at::gelu(bf16_halves[0].to(at::kFloat), "tanh") * bf16_halves[1].to(at::kFloat)) < 1e-2);
    // gpt-oss's clamped SwiGLU, with values well past its limit of 7 on both sides.
    at::Tensor wide = gate_up * 6;
    auto wide_halves = wide.chunk(2, -1);
    at::Tensor gate = wide_halves[0].clamp_max(7.0), up = wide_halves[1].clamp(-7.0, 7.0);
    at::Tensor clamped = (up + 1) * gate * at::sigmoid(gate * 1.702);
    CHECK(max_relative_error(fused::gated_activation(wide, Activation::kClampedSwiglu, 7.0), clamped) < 1e-5);
    CHECK(max_relative_error(fused::gated_activation(wide.to(at::kBFloat16), Activation::kClampedSwiglu, 7.0),
                             clamped) < 1e-2);
  }
}

TEST_CASE_FIXTURE(KernelsServe, "routed experts' biases by each row's expert and their rows combined per token equal the ATen arithmetic") {
  const int64_t tokens = 37, k = 4, experts = 6, hidden = 320, inner = 200;
  const at::TensorOptions longs = kCuda.dtype(at::kLong);
  at::Tensor pair_experts = at::randint(0, experts, {tokens * k}, longs);
  at::Tensor order = at::argsort(pair_experts), sorted_experts = pair_experts.index_select(0, order);
  at::Tensor row_of_pair = at::empty_like(order).index_copy_(0, order, at::arange(tokens * k, longs));
  at::Tensor weights = at::softmax(at::randn({tokens, k}, kCuda), -1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    at::Tensor rows = at::randn({tokens * k, hidden}, kCuda).to(dtype), bias = at::randn({experts, hidden}, kCuda).to(dtype);
    at::Tensor with_bias = rows + bias.index_select(0, sorted_experts);
    at::Tensor by_pair = at::empty_like(with_bias).index_copy_(0, order, with_bias).view({tokens, k, hidden});
    at::Tensor expected = (by_pair.to(at::kFloat) * weights.unsqueeze(-1)).sum(1);
    at::Tensor got = fused::combine_expert_rows(rows, row_of_pair, pair_experts, weights, bias);
    REQUIRE(got.defined());
    CHECK(max_relative_error(got, expected) < 1e-6);
    CHECK(max_relative_error(fused::combine_expert_rows(rows, row_of_pair, pair_experts, weights, {}),
                             (rows.index_select(0, row_of_pair).view({tokens, k, hidden}).to(at::kFloat) *
                              weights.unsqueeze(-1)).sum(1)) < 1e-6);

    at::Tensor gate_up = (at::randn({tokens * k, 2 * inner}, kCuda) * 4).to(dtype);
    at::Tensor gate_up_bias = at::randn({experts, 2 * inner}, kCuda).to(dtype);
    auto halves = (gate_up + gate_up_bias.index_select(0, sorted_experts)).to(at::kFloat).chunk(2, -1);
    at::Tensor gate = halves[0].clamp_max(7.0), up = halves[1].clamp(-7.0, 7.0);
    CHECK(max_relative_error(
              fused::gated_activation(gate_up, Activation::kClampedSwiglu, 7.0, gate_up_bias, sorted_experts),
              (up + 1) * gate * at::sigmoid(gate * 1.702)) < (dtype == at::kFloat ? 1e-5 : 1e-2));
    CHECK(max_relative_error(fused::gated_activation(gate_up, Activation::kSilu, 0, gate_up_bias, sorted_experts),
                             at::silu(halves[0]) * halves[1]) < (dtype == at::kFloat ? 1e-5 : 1e-2));
  }
}

TEST_CASE_FIXTURE(KernelsServe, "MXFP4 decoded on the GPU gives the CPU's bits: every byte, every scale, every float dtype") {
  at::Tensor blocks = at::randint(0, 256, {3, 40, 4, 16}, at::TensorOptions().dtype(at::kByte));
  blocks.view(-1).narrow(0, 0, 256).copy_(at::arange(256, at::kLong).to(at::kByte));
  at::Tensor scales = at::randint(0, 255, {3, 40, 4}, at::TensorOptions().dtype(at::kByte));  // 255 is NaN: refused on load
  scales.view(-1).narrow(0, 0, 255).copy_(at::arange(255, at::kLong).to(at::kByte));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    CAPTURE(dtype);
    at::Tensor expected = decode_mxfp4(blocks, scales, dtype);
    at::Tensor got = decode_mxfp4(blocks.to(kCuda.device()), scales.to(kCuda.device()), dtype);
    CHECK((got.scalar_type() == dtype));
    CHECK((got.sizes() == expected.sizes()));
    CHECK(at::equal(got.cpu(), expected));
    // One expert's slice (a view into the stacked experts), as the per-expert products decode it.
    CHECK(at::equal(decode_mxfp4(blocks.to(kCuda.device())[1], scales.to(kCuda.device())[1], dtype).cpu(), expected[1]));
  }
}

TEST_CASE_FIXTURE(KernelsServe, "fused queries and keys: per-head norm and rotary embedding, full and partial") {
  const int64_t batch = 2;
  // Head sizes 64, 128 and 256 with a rotary width a multiple of 64 take the kernels with a warp per head. The
  // bf16 kernel goes through a token's heads four at a time: 6 heads end in a partial group, Gemma 3's 12 do not;
  // 22 tokens (a decode step's few) spread each token's heads over groups of lanes, 300 give a token one group.
  for (int64_t tokens : {11, 150}) {
    for (int64_t heads : {4, 8}) {
      for (int64_t head_dim : {16, 64, 128, 256}) {
        const int64_t kv_heads = heads / 2;
        for (int64_t rotary_dim : {head_dim, head_dim / 4, 3 * head_dim / 4}) {
          CAPTURE(tokens);
          CAPTURE(heads);
          CAPTURE(head_dim);
          CAPTURE(rotary_dim);
          at::Tensor qkv = at::randn({batch, tokens, (heads + 2 * kv_heads) * head_dim}, kCuda);
          at::Tensor q_weight = at::randn({head_dim}, kCuda), k_weight = at::randn({head_dim}, kCuda);
          at::Tensor angles = at::rand({batch, 1, tokens, rotary_dim / 2}, kCuda) * 10;
          angles = at::cat({angles, angles}, -1);
          at::Tensor cos = angles.cos(), sin = angles.sin();
          auto rotate = [&](at::Tensor x) {  // x [B, h, T, d]
            at::Tensor r = x.narrow(-1, 0, rotary_dim), pass = x.narrow(-1, rotary_dim, head_dim - rotary_dim);
            int64_t half = rotary_dim / 2;
            at::Tensor rotated = at::cat({-r.narrow(-1, half, half), r.narrow(-1, 0, half)}, -1);
            return at::cat({r * cos + rotated * sin, pass}, -1);
          };
          at::Tensor q = qkv.narrow(-1, 0, heads * head_dim).view({batch, tokens, heads, head_dim});
          at::Tensor k = qkv.narrow(-1, heads * head_dim, kv_heads * head_dim).view({batch, tokens, kv_heads, head_dim});
          for (bool norm : {false, true}) {
            auto [fq, fk] = fused::queries_and_keys(qkv, heads, kv_heads, head_dim, norm ? q_weight : at::Tensor(),
                                                    norm ? k_weight : at::Tensor(), 1e-6, cos, sin, rotary_dim);
            at::Tensor eq = rotate((norm ? rms(q, q_weight, 1e-6) : q).transpose(1, 2));
            at::Tensor ek = rotate((norm ? rms(k, k_weight, 1e-6) : k).transpose(1, 2));
            CHECK(max_relative_error(fq, eq) < 1e-5);
            CHECK(max_relative_error(fk, ek) < 1e-5);
            // Token-major underneath: the attention's output then reshapes to [B, T, heads * head_dim] without a copy.
            CHECK(fq.transpose(1, 2).is_contiguous());
            CHECK(fk.transpose(1, 2).is_contiguous());
            // bf16 with the rotary embedding over whole heads of 64, 128 or 256 takes the kernel with 16-byte accesses.
            auto [bq, bk] = fused::queries_and_keys(qkv.to(at::kBFloat16), heads, kv_heads, head_dim,
                                                    norm ? q_weight : at::Tensor(), norm ? k_weight : at::Tensor(), 1e-6,
                                                    cos, sin, rotary_dim);
            CHECK((bq.scalar_type() == at::kBFloat16));
            CHECK(max_relative_error(bq, eq) < 2e-2);
            CHECK(max_relative_error(bk, ek) < 2e-2);
          }
        }
      }
    }
  }
}

TEST_CASE_FIXTURE(KernelsServe, "FP8 rows decoded on the GPU give the CPU's bits: every byte, partial blocks, every float dtype") {
  // Widths (and blocks) a multiple of 16 take the kernel with 16-byte loads, others the byte kernel; 40 with blocks of 32 and 130
  // with blocks of 128 end in a partial block.
  for (int64_t in : {64, 40, 130, 256}) {
    for (int64_t block_in : {32, 128}) {
      const int64_t out = 37, scale_columns = (in + block_in - 1) / block_in;
      at::Tensor bytes = at::randint(0, 256, {out, in}, at::TensorOptions().dtype(at::kByte));
      // Every byte once, the two NaN codes left out (NaN != NaN).
      bytes.view(-1).narrow(0, 0, 256).copy_(at::arange(256, at::kLong).to(at::kByte));
      bytes.masked_fill_((bytes == 0x7f).logical_or(bytes == 0xff), 0x7e);
      at::Tensor scales = at::rand({out, scale_columns}) * 4;
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
        CAPTURE(in);
        CAPTURE(block_in);
        CAPTURE(dtype);
        at::Tensor expected = decode_fp8_rows(bytes, scales, block_in, dtype);
        at::Tensor got = decode_fp8_rows(bytes.to(kCuda.device()), scales.to(kCuda.device()), block_in, dtype);
        CHECK((got.scalar_type() == dtype));
        CHECK(at::equal(got.cpu(), expected));
      }
    }
  }
}

TEST_CASE_FIXTURE(KernelsServe, "FP8 activation groups: each row's 128 inputs scaled by their largest over 448 and rounded to e4m3") {
  if (!fp8_block_products_run_on(kCuda.device(), at::kBFloat16)) return;  // not a Hopper GPU
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    at::Tensor x = (at::randn({3, 7, 384}, kCuda) * at::rand({3, 7, 384}, kCuda).pow(4) * 20).to(dtype);
    x[1][2].zero_();  // a padded row: scale 1, zero codes
    auto [codes, scales] = fused::quantize_fp8_groups(x);
    at::Tensor groups = x.to(at::kFloat).reshape({21, 3, 128});
    at::Tensor largest = groups.abs().amax(-1);
    at::Tensor expected_scales = largest / at::full_like(largest, 448);  // a true division (ATen multiplies by 1/448)
    expected_scales.masked_fill_(expected_scales == 0, 1);
    at::Tensor expected_codes = (groups / expected_scales.unsqueeze(-1)).to(at::kFloat8_e4m3fn).view(at::kByte);
    CAPTURE(dtype);
    CHECK(at::equal(scales, expected_scales));
    CHECK(scales.stride(0) == 1);  // column-major, as cuBLASLt reads activation scales
    CHECK(at::equal(codes, expected_codes.reshape({21, 384})));
  }
}

TEST_CASE_FIXTURE(KernelsServe, "FP8 block products equal the product of the dequantized operands, bias added, any leading shape") {
  if (!fp8_block_products_run_on(kCuda.device(), at::kBFloat16)) return;  // not a Hopper GPU
  const int64_t out = 384, in = 512;
  at::Tensor bytes = at::randint(0, 256, {out, in}, kCuda.dtype(at::kByte));
  bytes.masked_fill_((bytes.bitwise_and(0x7f) == 0x7f), 0x3c);  // no NaN codes
  // Block scales of very different sizes, so that a scale applied to the wrong block shows.
  at::Tensor block_scales = at::exp2(at::randint(-6, 6, {out / 128, in / 128}, kCuda));
  at::Tensor weight = decode_fp8_rows(bytes, fp8_row_scales(block_scales, out, 128), 128, at::kFloat);
  at::Tensor bias = at::randn({out}, kCuda).to(at::kBFloat16);
  Linear linear;
  linear.fp8 = Fp8Weight{bytes, fp8_row_scales(block_scales, out, 128), 128, at::kBFloat16, block_scales};
  linear.bias = bias;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{1, in}, {13, in}, {300, in}, {2, 5, in}}) {
    at::Tensor x = at::randn(shape, kCuda).to(at::kBFloat16);
    auto [codes, scales] = fused::quantize_fp8_groups(x);
    at::Tensor x_dequantized =
        (codes.view(at::kFloat8_e4m3fn).to(at::kFloat).view({-1, in / 128, 128}) * scales.unsqueeze(-1)).view({-1, in});
    std::vector<int64_t> out_shape = shape;
    out_shape.back() = out;
    at::Tensor expected = (at::matmul(x_dequantized, weight.t()) + bias.to(at::kFloat)).view(out_shape);
    at::Tensor got = probekit::model::linear(x, linear);
    CAPTURE(shape.front());
    CHECK((got.sizes() == expected.sizes()));
    CHECK((got.scalar_type() == at::kBFloat16));
    CHECK(max_relative_error(got, expected) < 1e-2);
    // Against the unquantized activations the product is off by the activations' rounding to e4m3 only.
    CHECK(max_relative_error(got, at::matmul(x.to(at::kFloat), weight.t()).view(out_shape) + bias.to(at::kFloat)) < 0.25);
  }
}

namespace {

// A pass of `tokens` queries a row over a cache, rows starting at `starts`.
struct CachedAttentionCase {
  int64_t tokens, capacity, visible, heads;
  std::vector<int64_t> starts;
};

// `kernel`'s cached attention against the masked softmax in fp32, with and without sinks, and the cache it writes.
void check_cached_attention(const CachedAttentionCase& shape, int64_t head_dim, int64_t window, int64_t kv_heads,
                            fused::CachedAttentionKernel kernel, at::ScalarType dtype) {
  const int64_t batch = static_cast<int64_t>(shape.starts.size()), tokens = shape.tokens;
  const int64_t capacity = shape.capacity, visible = shape.visible, heads = shape.heads;
  auto options = kCuda.dtype(dtype);
  // Token-major keys (as queries_and_keys writes them) and values sliced from a wider projection.
  at::Tensor q = at::randn({batch, tokens, heads, head_dim}, options).transpose(1, 2);
  at::Tensor k = at::randn({batch, tokens, kv_heads, head_dim}, options).transpose(1, 2);
  at::Tensor v = at::randn({batch, tokens, 3 * kv_heads * head_dim}, options)
                     .narrow(-1, kv_heads * head_dim, kv_heads * head_dim)
                     .view({batch, tokens, kv_heads, head_dim})
                     .transpose(1, 2);
  at::Tensor cache_keys = at::randn({batch, kv_heads, capacity, head_dim}, options);
  at::Tensor cache_values = at::randn({batch, kv_heads, capacity, head_dim}, options);
  at::Tensor start = at::tensor(shape.starts).view({batch, 1});
  at::Tensor positions = (start + at::arange(tokens, at::kLong).view({1, tokens})).to(kCuda.device());
  at::Tensor expected_keys = cache_keys.clone(), expected_values = cache_values.clone();
  at::Tensor slots = positions.view({batch, 1, tokens, 1}).expand({batch, kv_heads, tokens, head_dim});
  expected_keys.scatter_(2, slots, k);
  expected_values.scatter_(2, slots, v);
  at::Tensor seen = at::arange(visible, positions.options()).view({1, 1, visible}) <= positions.unsqueeze(-1);
  if (window > 0) seen = seen & ((positions.unsqueeze(-1) - at::arange(visible, positions.options())) < window);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  at::Tensor keys = expected_keys.narrow(2, 0, visible).repeat_interleave(heads / kv_heads, 1).to(at::kFloat);
  at::Tensor values = expected_values.narrow(2, 0, visible).repeat_interleave(heads / kv_heads, 1).to(at::kFloat);
  at::Tensor scores = at::matmul(q.to(at::kFloat), keys.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(seen.unsqueeze(1).logical_not(), -INFINITY);
  if (kernel == fused::CachedAttentionKernel::kTiled &&
      !fused::tiled_cached_attention_takes(heads, kv_heads, head_dim, tokens)) {
    // Declined only where its two buffers and the queries' tiles outgrow an H200's shared memory.
    CHECK(head_dim == 256);
    CHECK(heads / kv_heads * tokens > 96);
    at::Tensor keys_in = cache_keys.clone(), values_in = cache_values.clone();
    CHECK_THROWS(fused::cached_attention(q, k, v, keys_in, values_in, positions, visible, window, scale, {}, kernel));
    return;
  }
  // Sinks (gpt-oss): one more logit per head in the denominator, a column without a value.
  at::Tensor sinks = at::randn({heads}, kCuda);
  for (bool with_sinks : {false, true}) {
    CAPTURE(with_sinks);
    at::Tensor probabilities = at::softmax(scores, -1);
    if (with_sinks) {
      at::Tensor column = sinks.view({1, heads, 1, 1}).expand({batch, heads, tokens, 1});
      probabilities = at::softmax(at::cat({scores, column}, -1), -1).narrow(-1, 0, visible);
    }
    at::Tensor expected = at::matmul(probabilities, values);
    at::Tensor keys_in = cache_keys.clone(), values_in = cache_values.clone();
    at::Tensor got = fused::cached_attention(q, k, v, keys_in, values_in, positions, visible, window, scale,
                                             with_sinks ? sinks : at::Tensor(), kernel);
    CHECK(at::equal(keys_in, expected_keys));
    CHECK(at::equal(values_in, expected_values));
    CHECK(got.transpose(1, 2).is_contiguous());
    CHECK(max_relative_error(got, expected) < 2e-2);
  }
}

}  // namespace

TEST_CASE_FIXTURE(KernelsServe, "cached attention writes the keys and values at their positions and attends as a masked softmax") {
  // Steps of 5 tokens over 80 visible slots (the tiled kernel in two splits and a second kernel combining them) and
  // over 60 (one split, writing the outputs itself); decode steps with the probes' 12-token suffix over the tiled
  // kernel's chunks of 64 slots, up to 8 query heads a kv head, and 20 tokens of 8 heads over one (160 queries: more
  // output tiles than its warps). In each, the last row's last tokens past the visible slots see only those.
  const std::vector<CachedAttentionCase> cases{{5, 96, 80, 4, {3, 40, 78}},
                                               {5, 96, 60, 4, {3, 20, 58}},
                                               {13, 320, 300, 8, {0, 63, 150, 290}},
                                               {20, 320, 300, 8, {0, 100, 279}}};
  for (auto kernel : {fused::CachedAttentionKernel::kPerQuery, fused::CachedAttentionKernel::kTiled}) {
    for (const CachedAttentionCase& shape : cases) {
      for (int64_t head_dim : {64, 128, 256}) {
        for (int64_t window : {0, 7, 100}) {
          for (int64_t kv_heads : {1, 2, 4}) {
            for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
              CAPTURE(static_cast<int>(kernel));
              CAPTURE(shape.tokens);
              CAPTURE(shape.visible);
              CAPTURE(head_dim);
              CAPTURE(window);
              CAPTURE(kv_heads);
              CAPTURE(dtype);
              check_cached_attention(shape, head_dim, window, kv_heads, kernel, dtype);
            }
          }
        }
      }
    }
  }
}

namespace {

// fused::cached_attention's output from `kernel` over one pass of 13 tokens a row (a decode step and the probes'
// suffix), the rows' last tokens at slot `visible` - 1.
at::Tensor cached_attention_output(int64_t batch, int64_t visible, fused::CachedAttentionKernel kernel) {
  const int64_t heads = 8, kv_heads = 2, head_dim = 128, tokens = 13, capacity = 512;
  at::manual_seed(5);
  auto options = kCuda.dtype(at::kBFloat16);
  at::Tensor q = at::randn({batch, heads, tokens, head_dim}, options);
  at::Tensor k = at::randn({batch, kv_heads, tokens, head_dim}, options);
  at::Tensor v = at::randn({batch, kv_heads, tokens, head_dim}, options);
  at::Tensor cache_keys = at::randn({batch, kv_heads, capacity, head_dim}, options);
  at::Tensor cache_values = at::randn({batch, kv_heads, capacity, head_dim}, options);
  at::Tensor positions = (visible - tokens + at::arange(tokens, kCuda.dtype(at::kLong))).view({1, tokens}).repeat({batch, 1});
  return fused::cached_attention(q, k, v, cache_keys, cache_values, positions, visible, 0,
                                 1.0 / std::sqrt(static_cast<double>(head_dim)), {}, kernel);
}

}  // namespace

TEST_CASE_FIXTURE(KernelsServe, "cached attention's choice: one block per query for 1-3 rows over up to 256 visible slots, else tiled") {
  REQUIRE(fused::tiled_cached_attention_takes(8, 2, 128, 13));
  for (int64_t batch : {1, 3, 4}) {
    for (int64_t visible : {fused::kCachedAttentionShortSlots, fused::kCachedAttentionShortSlots + 1}) {
      CAPTURE(batch);
      CAPTURE(visible);
      const bool tiled = batch >= 4 || visible > fused::kCachedAttentionShortSlots;
      at::Tensor chosen = cached_attention_output(batch, visible, fused::CachedAttentionKernel::kChosen);
      at::Tensor per_query = cached_attention_output(batch, visible, fused::CachedAttentionKernel::kPerQuery);
      at::Tensor tiled_output = cached_attention_output(batch, visible, fused::CachedAttentionKernel::kTiled);
      // The two kernels round differently (the tiled one its probabilities to bf16), so equal bits name the kernel.
      REQUIRE_FALSE(at::equal(per_query, tiled_output));
      CHECK(at::equal(chosen, tiled ? tiled_output : per_query));
    }
  }
}

namespace {

DeltaNetWeights delta_net_to(const DeltaNetWeights& w, const at::Device& device) {
  DeltaNetWeights moved;
  moved.conv = w.conv.to(device), moved.A_log = w.A_log.to(device), moved.dt_bias = w.dt_bias.to(device);
  moved.norm = w.norm.to(device);
  return moved;
}

}  // namespace

TEST_CASE_FIXTURE(KernelsServe, "the Gated DeltaNet kernel equals the ATen mixer: carried and committed states, packed sequences") {
  // Qwen3.5-4B's heads, the fixtures', and widths the kernels pad (q and k to 32, 64 or 128, v to a multiple of 8);
  // 45 tokens cross the recurrence's chunks of 32.
  struct Shape {
    int64_t key_heads, value_heads, key_head_dim, value_head_dim;
  };
  for (const Shape& shape : {Shape{16, 32, 128, 128}, Shape{2, 4, 16, 16}, Shape{3, 3, 40, 72}, Shape{1, 2, 5, 3},
                             Shape{2, 2, 100, 127}}) {
    CAPTURE(shape.key_head_dim);
    ModelConfig c;
    c.norm_eps = 1e-6;
    LinearAttentionSpec& s = c.linear_attention;
    s.key_heads = shape.key_heads, s.value_heads = shape.value_heads, s.key_head_dim = shape.key_head_dim;
    s.value_head_dim = shape.value_head_dim, s.conv_kernel = 4;
    const int64_t channels = s.conv_channels(), width = channels + s.value_dim() + 2 * s.value_heads;
    DeltaNetWeights w;
    w.conv = at::randn({channels, s.conv_kernel}) * 0.5, w.A_log = at::randn({s.value_heads}) * 0.5;
    w.dt_bias = at::randn({s.value_heads}), w.norm = at::randn({s.value_head_dim}) + 1;
    const DeltaNetWeights on_gpu = delta_net_to(w, kCuda.device());
    at::Tensor projected = at::randn({3, 45, width});
    at::Tensor expected = delta_net_heads(projected, w, c, nullptr, {});
    at::Tensor got = delta_net_heads(projected.to(kCuda.device()), on_gpu, c, nullptr, {});
    CHECK(max_relative_error(got, expected) < 1e-4);

    // From given states, each row's left after its committed tokens (all, none, some).
    DeltaNetState before{at::randn({3, channels, s.conv_kernel - 1}),
                         at::randn({3, s.value_heads, s.key_head_dim, s.value_head_dim}) * 0.1};
    at::Tensor commit = at::tensor(std::vector<int64_t>{45, 0, 17});  // all, none, some
    DeltaNetState cpu_state = before, gpu_state{before.conv.to(kCuda.device()), before.recurrent.to(kCuda.device())};
    expected = delta_net_heads(projected, w, c, &cpu_state, commit);
    got = delta_net_heads(projected.to(kCuda.device()), on_gpu, c, &gpu_state, commit.to(kCuda.device()));
    CHECK(max_relative_error(got, expected) < 1e-4);
    CHECK(max_relative_error(gpu_state.recurrent, cpu_state.recurrent) < 1e-4);
    CHECK(at::equal(gpu_state.conv.cpu(), cpu_state.conv));

    // Packed sequences, each from zeros, one of them empty: as each alone.
    PackedSequences packed;
    packed.lengths = {45, 0, 1, 20};
    packed.cumulative_lengths = at::tensor(std::vector<int32_t>{0, 45, 45, 46, 66}).to(kCuda.device());
    std::vector<at::Tensor> rows, alone;
    for (size_t i = 0; i < packed.lengths.size(); ++i) {
      rows.push_back(projected.narrow(0, static_cast<int64_t>(i % 3), 1).narrow(1, 0, packed.lengths[i]));
      if (packed.lengths[i] > 0) alone.push_back(delta_net_heads(rows.back(), w, c, nullptr, {}));
    }
    got = packed_delta_net_heads(at::cat(rows, 1).to(kCuda.device()), packed, on_gpu, c);
    CHECK(max_relative_error(got, at::cat(alone, 1)) < 1e-4);

    // bf16 projections: the kernel reads them as they are and rounds its output once.
    at::Tensor rounded = projected.to(at::kBFloat16);
    expected = delta_net_heads(rounded.to(at::kFloat), w, c, nullptr, {});
    got = delta_net_heads(rounded.to(kCuda.device()), on_gpu, c, nullptr, {});
    CHECK((got.scalar_type() == at::kBFloat16));
    CHECK(max_relative_error(got, expected) < 1e-2);
  }
}
