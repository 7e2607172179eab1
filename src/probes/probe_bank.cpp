#include "probes/probe_bank.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "common/error.h"
#include "probes/random_streams.h"

#ifdef PROBEKIT_WITH_CUDA
#include "probes/fused_training.h"
#endif

namespace probekit::probes {

namespace {

// Intermediate tensors of an evaluation pass stay under this many elements per chunk of rows.
constexpr int64_t kChunkElements = 16 << 20;
constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

}  // namespace

int64_t mask_width(const ProbeShape& shape) { return shape.kind->dropout_layout(shape).width(); }

ProbeBank::ProbeBank(const ProbeShape& shape, int64_t probes, at::TensorOptions options)
    : shape_(shape), probes_(probes), kind_(shape.kind), specs_(parameter_specs(shape)) {
  if (shape.input_dim <= 0 || shape.outputs <= 0 || probes <= 0) {
    fail_input("probe bank: input_dim {}, outputs {} and probe count {} must be positive", shape.input_dim,
               shape.outputs, probes);
  }
  std::string problem = kind_->shape_problem(shape);
  if (!problem.empty()) fail_usage("{}", problem);
  int64_t offset = 0;
  for (ParameterSpec& spec : specs_) {
    spec.offset = offset;
    offset += probes * spec.numel();
  }
  values_ = at::zeros({offset}, options);
  // Gradients of the query and key rows of in_proj stay zero: backward() never writes them.
  gradients_ = at::zeros({offset}, options);
}

at::Tensor ProbeBank::parameter_in(const at::Tensor& flat, size_t index) const {
  const ParameterSpec& spec = specs_.at(index);
  std::vector<int64_t> shape = {probes_};
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  return flat.narrow(0, spec.offset, probes_ * spec.numel()).view(shape);
}

at::Tensor ProbeBank::parameter(size_t index) const { return parameter_in(values_, index); }

void ProbeBank::initialize_probe(int64_t probe, uint64_t key) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParameterSpec& spec = specs_[i];
    const double bound = kind_->initial_bound(specs_, i);
    at::Tensor draws = at::empty({spec.numel()}, at::kFloat);
    float* out = draws.data_ptr<float>();
    uint64_t parameter_key = mix64(key ^ mix64(i));
    at::parallel_for(0, spec.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        out[j] = static_cast<float>(-bound + 2.0 * bound * draw_uniform(parameter_key, static_cast<uint64_t>(j)));
      }
    });
    parameter(i)[probe].copy_(draws.view(spec.shape));
  }
}

at::Tensor ProbeBank::per_element(const at::Tensor& per_probe) const {
  std::vector<at::Tensor> blocks;
  for (const ParameterSpec& spec : specs_) {
    blocks.push_back(per_probe.view({probes_, 1}).expand({probes_, spec.numel()}).reshape({-1}));
  }
  return at::cat(blocks);
}

at::Tensor ProbeBank::forward(const at::Tensor& input) const {
  int64_t rows = input.size(0);
  int64_t width = kind_->evaluation_width(shape_);
  int64_t chunk = std::max<int64_t>(1, kChunkElements / (probes_ * width));
  if (rows <= chunk) return forward_chunk(input);
  std::vector<at::Tensor> parts;
  for (int64_t start = 0; start < rows; start += chunk) {
    parts.push_back(forward_chunk(input.narrow(0, start, std::min(chunk, rows - start))));
  }
  return at::cat(parts);
}

at::Tensor ProbeBank::forward_chunk(const at::Tensor& x) const {
  // No masks: the evaluation pass; only its logits are kept.
  return kind_->forward(*this, x, at::Tensor()).logits;
}

TrainActivations ProbeBank::forward_train(const at::Tensor& x, const at::Tensor& keep) const {
  return kind_->forward(*this, x, keep.to(x.scalar_type()) * (1.0 / (1.0 - shape_.dropout)));
}

void ProbeBank::backward(const TrainActivations& saved, const at::Tensor& grad_logits) {
  // Out-variants need lvalues: each gradient view is named before it is written.
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < specs_.size(); ++i) grads.push_back(parameter_in(gradients_, i));
  kind_->backward(*this, saved, grad_logits, grads);
}

at::Tensor draw_dropout_masks(const ProbeShape& shape, uint64_t key, int64_t first_row, int64_t rows) {
  const DropoutLayout layout = shape.kind->dropout_layout(shape);
  const int64_t width = layout.width();
  at::Tensor keep = at::empty({rows, width}, at::kByte);
  uint8_t* out = keep.data_ptr<uint8_t>();
  // Kept when a 32-bit draw falls below (1-p) * 2^32; each 64-bit hash serves two positions.
  auto threshold = static_cast<uint64_t>(std::llround((1.0 - shape.dropout) * 4294967296.0));
  auto draw = [&](int64_t row, int64_t column) -> uint8_t {
    auto index = static_cast<uint64_t>((first_row + row) * width + column);
    uint64_t bits = draw_bits(key, index >> 1) >> ((index & 1) * 32);
    return (bits & 0xFFFFFFFFull) < threshold ? 1 : 0;
  };
  // Grouped columns repeat one draw over their group (multihead: attention dropout zeroes a head's one weight).
  const int64_t per_element_columns = layout.elementwise, group = layout.group_size;
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      uint8_t* line = out + row * width;
      for (int64_t c = 0; c < per_element_columns; ++c) line[c] = draw(row, c);
      for (int64_t c = per_element_columns; c < width; ++c) {
        line[c] = draw(row, per_element_columns + (c - per_element_columns) / group);
      }
    }
  });
  return keep;
}

EpochBatches::EpochBatches(const ProbeShape& shape, uint64_t seed, int64_t epoch, int64_t rows, int64_t batch_size,
                           at::Device device)
    : rows_(rows), batch_size_(batch_size) {
  auto e = static_cast<uint64_t>(epoch);
  host_order_ = shuffled_order(stream_key(seed, Stream::kBatchOrder, e), rows);
  order_ = at::tensor(host_order_, at::kLong).to(device);
  keep_ = draw_dropout_masks(shape, stream_key(seed, Stream::kDropout, e), 0, rows).to(device);
}

at::Tensor EpochBatches::rows(int64_t step) const {
  int64_t first = step * batch_size_;
  return order_.narrow(0, first, std::min(batch_size_, rows_ - first));
}

at::Tensor EpochBatches::keep(int64_t step) const {
  int64_t first = step * batch_size_;
  return keep_.narrow(0, first, std::min(batch_size_, rows_ - first));
}

std::vector<double> epoch_learning_rates(double lr, int64_t epochs, bool cosine, double eta_min) {
  std::vector<double> rates;
  double current = lr;
  auto t_max = static_cast<double>(epochs);
  for (int64_t e = 0; e < epochs; ++e) {
    // Within T_max epochs torch's other branch ((e - 1 - T_max) % (2 T_max) == 0) is never taken.
    if (cosine && e > 0) {
      current = (1.0 + std::cos(kPi * static_cast<double>(e) / t_max)) /
                    (1.0 + std::cos(kPi * static_cast<double>(e - 1) / t_max)) * (current - eta_min) +
                eta_min;
    }
    rates.push_back(current);
  }
  return rates;
}

AdamW::AdamW(const at::Tensor& values, Options options)
    : options_(options), exp_avg_(at::zeros_like(values)), exp_avg_sq_(at::zeros_like(values)) {}

void AdamW::step(at::Tensor& values, const at::Tensor& gradients, double lr, const at::Tensor& active) {
  // The order of operations is torch.optim.AdamW's (single-tensor path), so results match it elementwise.
  ++steps_;
  double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, static_cast<double>(steps_)));
  double step_size = lr / bias_correction1;
  double decay = 1.0 - lr * options_.weight_decay;
#ifdef PROBEKIT_WITH_CUDA
  if (values.is_cuda() && values.scalar_type() == at::kFloat) {
    fused::adamw_step(values, exp_avg_, exp_avg_sq_, gradients, active,
                      {decay, options_.beta1, options_.beta2, options_.eps, bias_correction2_sqrt, step_size});
    return;
  }
#endif
  if (!active.defined()) {
    values.mul_(decay);
    exp_avg_.mul_(options_.beta1).add_(gradients, 1.0 - options_.beta1);
    exp_avg_sq_.mul_(options_.beta2).addcmul_(gradients, gradients, 1.0 - options_.beta2);
    at::Tensor denominator = (exp_avg_sq_.sqrt() / bias_correction2_sqrt).add_(options_.eps);
    values.addcdiv_(exp_avg_, denominator, -step_size);
    return;
  }
  at::Tensor exp_avg = exp_avg_.mul(options_.beta1).add_(gradients, 1.0 - options_.beta1);
  at::Tensor exp_avg_sq = exp_avg_sq_.mul(options_.beta2).addcmul_(gradients, gradients, 1.0 - options_.beta2);
  at::Tensor denominator = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options_.eps);
  at::Tensor updated = values.mul(decay).addcdiv_(exp_avg, denominator, -step_size);
  exp_avg_ = at::where(active, exp_avg, exp_avg_);
  exp_avg_sq_ = at::where(active, exp_avg_sq, exp_avg_sq_);
  values.copy_(at::where(active, updated, values));
}

}  // namespace probekit::probes
