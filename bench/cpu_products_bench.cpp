// The CPU's fp32 products: row_stable_linear (our fixed-order kernel) against at::linear (OpenBLAS, whichever kernel
// it picked) on the shapes a model's forward pass multiplies, and fixed_order_attention against ATen's attention.
// Prints one JSON line per shape: best-of-N seconds of each and their ratio.
//
//   cpu_products_bench [REPEATS (5)] [THREADS (LibTorch's default)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "device/torch/row_stable.h"
#include "model/fixed_order_attention.h"

namespace {

double best_seconds(const std::function<void()>& run, int repeats) {
  run();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

void product(int64_t rows, int64_t out, int64_t in, int repeats) {
  at::Tensor x = at::randn({rows, in}), w = at::randn({out, in});
  const double ours = best_seconds([&] { probekit::device::row_stable_linear(x, w); }, repeats);
  const double theirs = best_seconds([&] { at::linear(x, w); }, repeats);
  fmt::print(R"({{"op":"linear","rows":{},"out":{},"in":{},"row_stable_s":{:.6f},"at_linear_s":{:.6f},"ratio":{:.3f},"gflops":{:.1f}}})"
             "\n",
             rows, out, in, ours, theirs, ours / theirs, 2.0 * rows * out * in / ours * 1e-9);
}

void attention(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t depth, int repeats) {
  at::Tensor q = at::randn({1, heads, tokens, depth}), k = at::randn({1, kv_heads, tokens, depth});
  at::Tensor v = at::randn({1, kv_heads, tokens, depth});
  at::Tensor causal = at::ones({tokens, tokens}, at::kBool).tril();
  const double scale = 1.0 / std::sqrt(static_cast<double>(depth));
  const double ours =
      best_seconds([&] { probekit::model::fixed_order_attention(q, k, v, causal, scale, std::nullopt, {}); }, repeats);
  const double theirs = best_seconds(
      [&] {
        at::Tensor keys = k.repeat_interleave(heads / kv_heads, 1), values = v.repeat_interleave(heads / kv_heads, 1);
        at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) * scale;
        at::matmul(at::softmax(scores.masked_fill(causal.logical_not(), -INFINITY), -1), values);
      },
      repeats);
  fmt::print(R"({{"op":"attention","tokens":{},"heads":{},"kv_heads":{},"depth":{},"fixed_order_s":{:.6f},"aten_s":{:.6f},"ratio":{:.3f}}})"
             "\n",
             tokens, heads, kv_heads, depth, ours, theirs, ours / theirs);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  if (argc > 2) at::set_num_threads(std::atoi(argv[2]));
  fmt::print(R"({{"threads":{},"avx2":{}}})" "\n", at::get_num_threads(), probekit::device::row_stable_uses_avx2());
  // Gemma-3-4B's projections (hidden 2560, q/k/v 2048+1024+1024, MLP 10240) at a decode step's rows and a batch's.
  for (int64_t rows : {1, 16, 256, 1024}) {
    product(rows, 4096, 2560, repeats);
    product(rows, 20480, 2560, repeats);
    product(rows, 2560, 10240, repeats);
  }
  product(64, 45, 2560, repeats);  // 45 probes
  for (int64_t tokens : {128, 512}) attention(tokens, 8, 4, 256, repeats);
  return 0;
}
