// The kernels of probes/fused_training.h, in fp32, each the ATen path's arithmetic in its order.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "probes/fused_training.h"

namespace probekit::probes::fused {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t total) { return static_cast<int>((total + kThreads - 1) / kThreads); }

// One thread per probe, walking the batch: loss = (1 - y) z + (1 + (w - 1) y) softplus(-z),
// d loss / dz = sigmoid(z) (1 + (w - 1) y) - w y (binary_trainer.cpp's bce_with_logits).
__global__ void bce_kernel(const float* logits, const float* targets, const int64_t* rows, const float* pos_weight,
                           float* loss_sum, float* grad, int64_t batch, int64_t probes) {
  int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= probes) return;
  float w = pos_weight[k], loss = 0.0f;
  auto count = static_cast<float>(batch);
  for (int64_t b = 0; b < batch; ++b) {
    float z = logits[b * probes + k], y = targets[rows[b] * probes + k];
    float positive_scale = (w - 1.0f) * y + 1.0f;
    float softplus_negative = log1pf(expf(-fabsf(z))) + fmaxf(-z, 0.0f);
    loss += (1.0f - y) * z + positive_scale * softplus_negative;
    float sigmoid = 1.0f / (1.0f + expf(-z));
    grad[b * probes + k] = (sigmoid * positive_scale - w * y) / count;
  }
  loss_sum[k] += loss / count;
}

// torch.optim.AdamW's single-tensor step: p *= decay; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p += -step_size m / (sqrt(v) / bias_correction2_sqrt + eps).
__global__ void adamw_kernel(float* values, float* exp_avg, float* exp_avg_sq, const float* gradients,
                             const bool* active, int64_t total, float decay, float beta1, float one_minus_beta1,
                             float beta2, float one_minus_beta2, float bias_correction2_sqrt, float eps,
                             float step_size) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= total || (active != nullptr && !active[i])) return;
  float g = gradients[i];
  float m = exp_avg[i] * beta1 + one_minus_beta1 * g;
  float v = exp_avg_sq[i] * beta2 + one_minus_beta2 * g * g;
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  float denominator = sqrtf(v) / bias_correction2_sqrt + eps;
  values[i] = values[i] * decay + -step_size * (m / denominator);
}

void check_float(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous(), "fused training kernels: ", what,
              " must be a contiguous fp32 CUDA tensor");
}

}  // namespace

at::Tensor bce_with_logits_batch(const at::Tensor& logits_in, const at::Tensor& targets, const at::Tensor& rows_in,
                                 const at::Tensor& pos_weight, at::Tensor& loss_sum) {
  c10::cuda::CUDAGuard guard(logits_in.device());
  at::Tensor logits = logits_in.contiguous();
  at::Tensor rows = rows_in.contiguous();
  check_float(logits, "logits");
  check_float(targets, "targets");
  check_float(pos_weight, "pos_weight");
  check_float(loss_sum, "loss_sum");
  int64_t batch = logits.size(0), probes = logits.size(1);
  at::Tensor grad = at::empty_like(logits);
  if (batch == 0 || probes == 0) return grad;
  bce_kernel<<<blocks_for(probes), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      logits.data_ptr<float>(), targets.data_ptr<float>(), rows.data_ptr<int64_t>(), pos_weight.data_ptr<float>(),
      loss_sum.data_ptr<float>(), grad.data_ptr<float>(), batch, probes);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad;
}

void adamw_step(at::Tensor& values, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const at::Tensor& gradients,
                const at::Tensor& active, const AdamWStep& s) {
  c10::cuda::CUDAGuard guard(values.device());
  check_float(values, "values");
  check_float(exp_avg, "exp_avg");
  check_float(exp_avg_sq, "exp_avg_sq");
  check_float(gradients, "gradients");
  at::Tensor mask = active.defined() ? active.contiguous() : active;
  TORCH_CHECK(!mask.defined() || (mask.scalar_type() == at::kBool && mask.numel() == values.numel()),
              "fused training kernels: the active mask must be bool, one flag per value");
  int64_t total = values.numel();
  if (total == 0) return;
  adamw_kernel<<<blocks_for(total), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      values.data_ptr<float>(), exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(), gradients.data_ptr<float>(),
      mask.defined() ? mask.data_ptr<bool>() : nullptr, total, static_cast<float>(s.decay),
      static_cast<float>(s.beta1), static_cast<float>(1.0 - s.beta1), static_cast<float>(s.beta2),
      static_cast<float>(1.0 - s.beta2), static_cast<float>(s.bias_correction2_sqrt), static_cast<float>(s.eps),
      static_cast<float>(s.step_size));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace probekit::probes::fused
