// The fused CUDA kernels against the same arithmetic in ATen ops, on odd sizes and every float dtype.
#include <doctest/doctest.h>

#include "gpu/gpu_test_util.h"
#include "model/fused_ops.h"

using namespace probekit::model;
using probekit::testing::max_relative_error;

namespace {

const at::TensorOptions kCuda = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);

at::Tensor rms(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  return x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps) * weight;
}

}  // namespace

TEST_CASE("fused rms_norm and residual_add equal the ATen arithmetic") {
  // Widths a multiple of 4 take the kernel holding the row in registers (2, 4, 8 or 16 quads a thread: 2560 and
  // 9000 take 2 and 8); 333 the plain one; 40000 is past the register kernel's widest row.
  for (int64_t width : {64, 333, 2560, 9000, 40000}) {
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

TEST_CASE("fused residual_add of two branches gives the bits of two adds of one") {
  // 2560 and 9000 take the register kernel, which adds both in one pass; 333 (the plain kernel) and branches of
  // two dtypes write the first sum and add the second to it.
  for (int64_t width : {333, 2560, 9000}) {
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

TEST_CASE("fused gated activations equal act(gate) * up") {
  // 1000 columns take the row kernel with vector accesses; 999 the element-wise one.
  for (int64_t inner : {1000, 999}) {
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
  }
}

TEST_CASE("fused queries and keys: per-head norm and rotary embedding, full and partial") {
  const int64_t batch = 2, tokens = 11;
  // Head sizes 64, 128 and 256 with a rotary width a multiple of 64 take the kernels with a warp per head. The
  // bf16 kernel goes through a token's heads four at a time: 6 heads end in a partial group, Gemma 3's 12 do not.
  for (int64_t heads : {4, 8}) {
    for (int64_t head_dim : {16, 64, 128, 256}) {
      const int64_t kv_heads = heads / 2;
      for (int64_t rotary_dim : {head_dim, head_dim / 4, 3 * head_dim / 4}) {
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
