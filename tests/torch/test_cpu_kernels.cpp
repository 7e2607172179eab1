// The CPU's fixed-order kernels (device/torch/row_stable.h, model/fixed_order_attention.h): their numbers are the
// reference's within rounding, and do not depend on the rows beside them, on masked slots, or on OpenBLAS's kernel.
#include <doctest/doctest.h>

#include <cstdlib>
#include <limits>

#include "model/fixed_order_attention.h"
#include "test_util.h"

using namespace probekit;

namespace {

// softmax(q k^T scale, masked) v in float64, keys and values repeated per query head.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                               double scale) {
  const int64_t repeats = q.size(1) / k.size(1);
  at::Tensor keys = k.to(at::kDouble).repeat_interleave(repeats, 1), values = v.to(at::kDouble).repeat_interleave(repeats, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble), keys.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), values);
}

}  // namespace

TEST_CASE("fixed-order attention equals the reference within rounding, and masked slots and rows beside change no bit" *
          doctest::test_suite("numeric")) {
  at::manual_seed(3);
  const int64_t batch = 3, heads = 4, kv_heads = 2, tokens = 5, slots = 37, depth = 24;
  at::Tensor q = at::randn({batch, heads, tokens, depth}), k = at::randn({batch, kv_heads, slots, depth});
  at::Tensor v = at::randn({batch, kv_heads, slots, depth});
  // Each row sees a different number of slots, each query up to its own position (decoding's cache mask).
  at::Tensor visible = at::tensor({20, 37, 9}, at::kLong).view({batch, 1, 1, 1});
  at::Tensor positions = at::arange(tokens, at::kLong).view({1, 1, tokens, 1}) + visible - tokens;
  at::Tensor allowed = at::arange(slots, at::kLong).view({1, 1, 1, slots}) <= positions;
  const double scale = 0.2;
  at::Tensor ours = model::fixed_order_attention(q, k, v, allowed, scale, std::nullopt, {});
  CHECK(at::allclose(ours.to(at::kDouble), reference_attention(q, k, v, allowed, scale), 1e-5, 1e-6));
  for (int64_t b = 0; b < batch; ++b) {
    CAPTURE(b);
    const int64_t seen = visible.flatten()[b].item<int64_t>();
    // The row alone, its keys cut to the slots it sees: the same bits as among the others, with their padding.
    at::Tensor alone = model::fixed_order_attention(q.narrow(0, b, 1), k.narrow(0, b, 1).narrow(2, 0, seen),
                                                    v.narrow(0, b, 1).narrow(2, 0, seen),
                                                    allowed.narrow(0, b, 1).narrow(3, 0, seen), scale, std::nullopt, {});
    CHECK(at::equal(alone, ours.narrow(0, b, 1)));
  }
  // Causal without a mask: query t sees slots up to t.
  at::Tensor square_k = k.narrow(2, 0, tokens), square_v = v.narrow(2, 0, tokens);
  at::Tensor causal = at::ones({tokens, tokens}, at::kBool).tril();
  CHECK(at::equal(model::fixed_order_attention(q, square_k, square_v, {}, scale, std::nullopt, {}),
                  model::fixed_order_attention(q, square_k, square_v, causal, scale, std::nullopt, {})));
}

// OpenBLAS chooses its kernel at run time (OPENBLAS_CORETYPE, else the CPU): the model's fp32 CPU numbers must not
// depend on it. The same text's hidden states through inspect_model under two kernels, compared byte for byte.
TEST_CASE("the model's fp32 hidden states are the same bits under two OpenBLAS kernels" * doctest::test_suite("numeric")) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    MESSAGE("skipped: this CPU cannot run OpenBLAS's Haswell kernel (no AVX2 and FMA)");
    return;
  }
#else
  MESSAGE("skipped: OPENBLAS_CORETYPE names x86-64 kernels");
  return;
#endif
  testing::TempDir tmp;
  for (const char* kernel : {"Haswell", "SandyBridge"}) {
    testing::CommandResult r = testing::run_command(
        fmt::format("OPENBLAS_CORETYPE={} {} hidden --model {} --device cpu --dtype fp32 --output {} --text "
                    "'Once upon a time, in a land of probes and streams, a model read every token.'",
                    kernel, testing::tool("inspect_model"), testing::kGemmaModel, tmp.file(std::string(kernel) + ".safetensors")));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  }
  CHECK(testing::read_text(tmp.file("Haswell.safetensors")) == testing::read_text(tmp.file("SandyBridge.safetensors")));
}
