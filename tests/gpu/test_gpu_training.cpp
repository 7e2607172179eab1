// The fused CUDA kernels of probe training against the ATen path the CPU runs; the attention probe's passes on the
// GPU against the CPU's.
#include <doctest/doctest.h>

#include "gpu/gpu_test_util.h"
#include "probes/binary_trainer.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"

using namespace probekit::probes;
using probekit::testing::max_relative_error;

namespace {

const at::Device kCuda(at::kCUDA, 0);

}  // namespace

TEST_CASE("fused batch loss and gradient equal the ATen path") {
  at::manual_seed(3);
  const int64_t rows = 50, batch = 17, probes = 45;
  at::Tensor logits = at::randn({batch, probes}) * 4;
  at::Tensor targets = (at::rand({rows, probes}) < 0.3).to(at::kFloat);
  at::Tensor batch_rows = at::randperm(rows, at::kLong).narrow(0, 0, batch);
  at::Tensor pos_weight = at::rand({probes}) * 40 + 1;
  at::Tensor cpu_sum = at::full({probes}, 0.5), gpu_sum = cpu_sum.to(kCuda);
  at::Tensor cpu_grad = batch_loss_gradient(logits, targets, batch_rows, pos_weight, cpu_sum);
  at::Tensor gpu_grad = batch_loss_gradient(logits.to(kCuda), targets.to(kCuda), batch_rows.to(kCuda),
                                            pos_weight.to(kCuda), gpu_sum);
  CHECK(max_relative_error(gpu_grad, cpu_grad) < 1e-6);
  CHECK(max_relative_error(gpu_sum, cpu_sum) < 1e-6);
  // A column-major view of the logits (the multi-head probes' [K, B] permuted) gives the same.
  at::Tensor permuted = logits.t().contiguous().t().to(kCuda);
  CHECK(max_relative_error(batch_loss_gradient(permuted, targets.to(kCuda), batch_rows.to(kCuda), pos_weight.to(kCuda),
                                               gpu_sum),
                           cpu_grad) < 1e-6);
}

TEST_CASE("fused AdamW steps equal the ATen path, with and without frozen elements") {
  at::manual_seed(4);
  const int64_t size = 3 * 2561;
  at::Tensor start = at::randn({size});
  at::Tensor active = at::rand({size}) < 0.7;
  AdamW::Options options{1e-3, 0.9, 0.999, 1e-8};
  at::Tensor cpu_values = start.clone(), gpu_values = start.to(kCuda);
  AdamW cpu(cpu_values, options), gpu(gpu_values, options);
  at::Tensor gpu_before_masking;
  for (int step = 0; step < 6; ++step) {
    at::Tensor gradients = at::randn({size}) * (step + 1);
    bool masked = step >= 3;
    if (step == 3) gpu_before_masking = gpu_values.clone();
    double lr = 5e-4 / (step + 1);
    cpu.step(cpu_values, gradients, lr, masked ? active : at::Tensor());
    gpu.step(gpu_values, gradients.to(kCuda), lr, masked ? active.to(kCuda) : at::Tensor());
    INFO("step " << step);
    CHECK(max_relative_error(gpu_values, cpu_values) < 1e-6);
  }
  // Frozen elements kept, exactly, the values they had before the masked steps.
  at::Tensor frozen = active.logical_not().to(kCuda);
  CHECK(at::equal(gpu_values.masked_select(frozen), gpu_before_masking.masked_select(frozen)));
}

TEST_CASE("attention probe passes on the GPU equal the CPU's and repeat bit for bit") {
  at::manual_seed(5);
  ProbeShape shape;
  shape.kind = &probe_kind("attention");
  shape.input_dim = 64;
  shape.heads = 2;
  shape.dropout = 0.0;
  shape.skip_leading = 1;
  const std::vector<int64_t> offsets = {0, 3, 40, 41, 100};
  const std::vector<int64_t> texts = {2, 0, 3, 1};
  TokenIndex index = token_index(token_layout(offsets, shape), texts.data(), 4);
  at::Tensor rows = at::randn({100, 64});
  ProbeBank cpu(shape, 5, at::TensorOptions().dtype(at::kFloat));
  for (int64_t p = 0; p < 5; ++p) cpu.initialize_probe(p, static_cast<uint64_t>(p));
  cpu.values().add_(at::randn_like(cpu.values()) * 0.2);
  ProbeBank gpu(shape, 5, at::TensorOptions().dtype(at::kFloat).device(kCuda));
  gpu.values().copy_(cpu.values());
  at::Tensor grad = at::randn({4, 5, 1});
  TrainActivations on_cpu = shape.kind->forward_tokens(cpu, token_batch(rows, index));
  cpu.backward(on_cpu, grad);
  auto run_gpu = [&] {
    TrainActivations saved = shape.kind->forward_tokens(gpu, token_batch(rows.to(kCuda), index));
    gpu.backward(saved, grad.to(kCuda));
    return std::make_pair(saved.logits.clone(), gpu.gradients().clone());
  };
  auto [logits, gradients] = run_gpu();
  auto [logits_again, gradients_again] = run_gpu();
  CHECK(max_relative_error(logits, on_cpu.logits) < 1e-5);
  CHECK(max_relative_error(gradients, cpu.gradients()) < 1e-4);
  CHECK(at::equal(logits, logits_again));
  CHECK(at::equal(gradients, gradients_again));
}
