// The reference's linear probe, Dropout(p) -> Linear(H, O), as a class that the kinds fitted by their own solver
// (logistic, mean-diff) derive from: they store the same linear.weight and linear.bias and score as it does, so
// inference, generation, the server and the export read them as linear probes.
#pragma once

#include "probes/kinds/kinds.h"

namespace probekit::probes {

class LinearKind : public ProbeKind {
 public:
  /// Positions of linear.weight [O, H] and linear.bias [O] in parameters().
  enum Parameter : size_t { kWeight, kBias };

  const char* name() const override { return "linear"; }
  std::string reference_class(bool binary) const override { return binary ? "BinaryLinearProbe" : "LinearProbe"; }
  std::vector<ParameterSpec> parameters(const ProbeShape& s) const override;
  DropoutLayout dropout_layout(const ProbeShape& s) const override { return {s.input_dim, 0, 1}; }
  int64_t evaluation_width(const ProbeShape& s) const override { return s.outputs; }
  TrainActivations forward(const ProbeBank& bank, const at::Tensor& x, const at::Tensor& masks) const override;
  void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                std::vector<at::Tensor>& grads) const override;
  at::Tensor direction(const ProbeBank& bank, int64_t probe, int64_t output) const override;

 protected:
  /// Writes fitted weights [K, O, H] and biases [K, O] (any float dtype and device) into `bank`.
  static void store(ProbeBank& bank, const at::Tensor& weight, const at::Tensor& bias);
};

}  // namespace probekit::probes
