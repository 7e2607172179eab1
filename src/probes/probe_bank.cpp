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

// Positions in parameter_specs() of the multi-head probe's parameters.
enum MultiheadParameter : size_t {
  kEncoder0Weight, kEncoder0Bias, kEncoder3Weight, kEncoder3Bias, kInProjWeight, kInProjBias,
  kOutProjWeight, kOutProjBias, kClassifierWeight, kClassifierBias
};
enum LinearParameter : size_t { kLinearWeight, kLinearBias };

// Intermediate tensors of an evaluation pass stay under this many elements per chunk of rows.
constexpr int64_t kChunkElements = 16 << 20;
constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

at::Tensor transpose_last(const at::Tensor& t) { return t.transpose(-1, -2); }

// bias [K, n] as [K, 1, n], to add to every row of a [K, B, n] batch.
at::Tensor row_bias(const at::Tensor& bias) { return bias.unsqueeze(1); }

}  // namespace

std::string kind_name(ProbeKind kind) { return kind == ProbeKind::kLinear ? "linear" : "multihead"; }

ProbeKind parse_kind(const std::string& name) {
  if (name == "linear") return ProbeKind::kLinear;
  if (name == "multihead") return ProbeKind::kMultihead;
  fail_usage("unknown probe model type '{}' (expected linear or multihead)", name);
}

int64_t ProbeShape::mask_width() const { return kind == ProbeKind::kLinear ? input_dim : 3 * hidden_dim; }

int64_t ParameterSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterSpec> parameter_specs(const ProbeShape& s) {
  std::vector<ParameterSpec> specs;
  if (s.kind == ProbeKind::kLinear) {
    specs = {{"linear.weight", {s.outputs, s.input_dim}}, {"linear.bias", {s.outputs}}};
  } else {
    int64_t h = s.hidden_dim;
    specs = {{"encoder.0.weight", {h, s.input_dim}},     {"encoder.0.bias", {h}},
             {"encoder.3.weight", {h, h}},               {"encoder.3.bias", {h}},
             {"attention.in_proj_weight", {3 * h, h}},   {"attention.in_proj_bias", {3 * h}},
             {"attention.out_proj.weight", {h, h}},      {"attention.out_proj.bias", {h}},
             {"classifier.weight", {s.outputs, h}},      {"classifier.bias", {s.outputs}}};
  }
  return specs;
}

ProbeBank::ProbeBank(const ProbeShape& shape, int64_t probes, at::TensorOptions options)
    : shape_(shape), probes_(probes), specs_(parameter_specs(shape)) {
  if (shape.input_dim <= 0 || shape.outputs <= 0 || probes <= 0) {
    fail_input("probe bank: input_dim {}, outputs {} and probe count {} must be positive", shape.input_dim,
               shape.outputs, probes);
  }
  if (shape.kind == ProbeKind::kMultihead &&
      (shape.heads <= 0 || shape.hidden_dim <= 0 || shape.hidden_dim % shape.heads != 0)) {
    fail_usage("--hidden-dim {} must be a positive multiple of the {} attention heads", shape.hidden_dim, shape.heads);
  }
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
    int64_t fan_in = spec.shape.size() == 2 ? spec.shape[1] : 0;
    double bound = 0.0;
    if (spec.name == "attention.in_proj_weight") {
      bound = std::sqrt(6.0 / static_cast<double>(spec.shape[0] + spec.shape[1]));  // xavier_uniform
    } else if (spec.name == "attention.in_proj_bias" || spec.name == "attention.out_proj.bias") {
      bound = 0.0;
    } else if (spec.shape.size() == 2) {
      bound = 1.0 / std::sqrt(static_cast<double>(fan_in));  // kaiming_uniform(a=sqrt(5))
    } else {
      // A Linear's bias: U(+-1/sqrt(fan_in)) of its weight, the spec just before it.
      bound = 1.0 / std::sqrt(static_cast<double>(specs_[i - 1].shape[1]));
    }
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
  int64_t width = shape_.kind == ProbeKind::kLinear ? shape_.outputs : shape_.hidden_dim;
  int64_t chunk = std::max<int64_t>(1, kChunkElements / (probes_ * width));
  if (rows <= chunk) return forward_chunk(input);
  std::vector<at::Tensor> parts;
  for (int64_t start = 0; start < rows; start += chunk) {
    parts.push_back(forward_chunk(input.narrow(0, start, std::min(chunk, rows - start))));
  }
  return at::cat(parts);
}

at::Tensor ProbeBank::forward_chunk(const at::Tensor& x) const {
  // Masks of ones are the evaluation pass; only its logits are kept.
  return forward_with_masks(x, at::ones({x.size(0), shape_.mask_width()}, x.options())).logits;
}

TrainActivations ProbeBank::forward_train(const at::Tensor& x, const at::Tensor& keep) const {
  return forward_with_masks(x, keep.to(x.scalar_type()) * (1.0 / (1.0 - shape_.dropout)));
}

TrainActivations ProbeBank::forward_with_masks(const at::Tensor& x, const at::Tensor& masks) const {
  TrainActivations saved;
  saved.masks = masks;
  int64_t batch = x.size(0), k = probes_, o = shape_.outputs;
  if (shape_.kind == ProbeKind::kLinear) {
    saved.input = x * masks;
    at::Tensor weight = parameter(kLinearWeight).view({k * o, shape_.input_dim});
    saved.logits = at::addmm(parameter(kLinearBias).view({k * o}), saved.input, weight.t()).view({batch, k, o});
    return saved;
  }
  int64_t h = shape_.hidden_dim;
  at::Tensor mask1 = masks.narrow(1, 0, h), mask2 = masks.narrow(1, h, h), attention_mask = masks.narrow(1, 2 * h, h);
  saved.input = x;
  // One [B, H] x [H, K*h] product for the first layer of all K encoders.
  at::Tensor w1 = parameter(kEncoder0Weight).view({k * h, shape_.input_dim});
  saved.pre_relu1 = at::addmm(parameter(kEncoder0Bias).view({k * h}), x, w1.t()).view({batch, k, h}).permute({1, 0, 2});
  saved.encoded1 = at::relu(saved.pre_relu1) * mask1;  // [K, B, h]
  saved.pre_relu2 = at::baddbmm(row_bias(parameter(kEncoder3Bias)), saved.encoded1, transpose_last(parameter(kEncoder3Weight)));
  saved.encoded2 = at::relu(saved.pre_relu2) * mask2;
  at::Tensor value_weight = parameter(kInProjWeight).narrow(1, 2 * h, h);  // W_v: [K, h, h]
  at::Tensor value_bias = parameter(kInProjBias).narrow(1, 2 * h, h);
  saved.attended = at::baddbmm(row_bias(value_bias), saved.encoded2, transpose_last(value_weight)) * attention_mask;
  saved.attention_out = at::baddbmm(row_bias(parameter(kOutProjBias)), saved.attended, transpose_last(parameter(kOutProjWeight)));
  at::Tensor logits = at::baddbmm(row_bias(parameter(kClassifierBias)), saved.attention_out,
                                  transpose_last(parameter(kClassifierWeight)));  // [K, B, O]
  saved.logits = logits.permute({1, 0, 2});
  return saved;
}

void ProbeBank::backward(const TrainActivations& saved, const at::Tensor& grad_logits) {
  int64_t batch = saved.input.size(0), k = probes_, o = shape_.outputs;
  // Out-variants need lvalues: each gradient view is named before it is written.
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < specs_.size(); ++i) grads.push_back(parameter_in(gradients_, i));
  if (shape_.kind == ProbeKind::kLinear) {
    at::Tensor g = grad_logits.reshape({batch, k * o});
    at::Tensor weight_grad = grads[kLinearWeight].view({k * o, shape_.input_dim});
    at::Tensor bias_grad = grads[kLinearBias].view({k * o});
    at::mm_out(weight_grad, g.t(), saved.input);
    at::sum_out(bias_grad, g, at::IntArrayRef{0});
    return;
  }
  int64_t h = shape_.hidden_dim;
  at::Tensor mask1 = saved.masks.narrow(1, 0, h), mask2 = saved.masks.narrow(1, h, h);
  at::Tensor attention_mask = saved.masks.narrow(1, 2 * h, h);
  at::Tensor g = grad_logits.permute({1, 0, 2}).contiguous();  // [K, B, O]

  at::bmm_out(grads[kClassifierWeight], transpose_last(g), saved.attention_out);
  at::sum_out(grads[kClassifierBias], g, at::IntArrayRef{1});
  at::Tensor grad_out = at::bmm(g, parameter(kClassifierWeight));  // [K, B, h]

  at::bmm_out(grads[kOutProjWeight], transpose_last(grad_out), saved.attended);
  at::sum_out(grads[kOutProjBias], grad_out, at::IntArrayRef{1});
  at::Tensor grad_value = at::bmm(grad_out, parameter(kOutProjWeight)) * attention_mask;

  at::Tensor value_weight = parameter(kInProjWeight).narrow(1, 2 * h, h);
  grads[kInProjWeight].narrow(1, 2 * h, h).copy_(at::bmm(transpose_last(grad_value), saved.encoded2));
  grads[kInProjBias].narrow(1, 2 * h, h).copy_(grad_value.sum(1));
  at::Tensor grad_pre2 = at::threshold_backward(at::bmm(grad_value, value_weight) * mask2, saved.pre_relu2, 0);

  at::bmm_out(grads[kEncoder3Weight], transpose_last(grad_pre2), saved.encoded1);
  at::sum_out(grads[kEncoder3Bias], grad_pre2, at::IntArrayRef{1});
  at::Tensor grad_pre1 =
      at::threshold_backward(at::bmm(grad_pre2, parameter(kEncoder3Weight)) * mask1, saved.pre_relu1, 0);

  // One [K*h, B] x [B, H] product for the first layer of all K encoders.
  at::Tensor encoder0_grad = grads[kEncoder0Weight].view({k * h, shape_.input_dim});
  at::mm_out(encoder0_grad, grad_pre1.permute({0, 2, 1}).reshape({k * h, batch}), saved.input);
  at::sum_out(grads[kEncoder0Bias], grad_pre1, at::IntArrayRef{1});
}

at::Tensor draw_dropout_masks(const ProbeShape& shape, uint64_t key, int64_t first_row, int64_t rows) {
  int64_t width = shape.mask_width();
  at::Tensor keep = at::empty({rows, width}, at::kByte);
  uint8_t* out = keep.data_ptr<uint8_t>();
  // Kept when a 32-bit draw falls below (1-p) * 2^32; each 64-bit hash serves two positions.
  auto threshold = static_cast<uint64_t>(std::llround((1.0 - shape.dropout) * 4294967296.0));
  auto draw = [&](int64_t row, int64_t column) -> uint8_t {
    auto index = static_cast<uint64_t>((first_row + row) * width + column);
    uint64_t bits = draw_bits(key, index >> 1) >> ((index & 1) * 32);
    return (bits & 0xFFFFFFFFull) < threshold ? 1 : 0;
  };
  // Multihead: columns [0, 2h) are the encoder's dropouts; [2h, 3h) hold one draw per head, repeated over its
  // dimensions, because attention dropout zeroes a head's single attention weight.
  int64_t per_element_columns = shape.kind == ProbeKind::kLinear ? width : 2 * shape.hidden_dim;
  int64_t head_dim = shape.kind == ProbeKind::kLinear ? 1 : shape.hidden_dim / shape.heads;
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      uint8_t* line = out + row * width;
      for (int64_t c = 0; c < per_element_columns; ++c) line[c] = draw(row, c);
      for (int64_t c = per_element_columns; c < width; ++c) {
        line[c] = draw(row, per_element_columns + (c - per_element_columns) / head_dim);
      }
    }
  });
  return keep;
}

EpochBatches::EpochBatches(const ProbeShape& shape, uint64_t seed, int64_t epoch, int64_t rows, int64_t batch_size,
                           at::Device device)
    : rows_(rows), batch_size_(batch_size) {
  auto e = static_cast<uint64_t>(epoch);
  order_ = at::tensor(shuffled_order(stream_key(seed, Stream::kBatchOrder, e), rows), at::kLong).to(device);
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
