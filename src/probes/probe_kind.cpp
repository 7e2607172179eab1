#include "probes/probe_kind.h"

#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "probes/probe_bank.h"
#include "probes/token_rows.h"


namespace probekit::probes {

int64_t ParameterSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> ProbeKind::own_flags() const {
  std::vector<std::string> flags;
  if (reads_every_token()) flags.emplace_back("--max-tokens");
  if (fits_directly()) flags.emplace_back("--C");
  return flags;
}

std::string ProbeKind::shape_problem(const ProbeShape&) const { return ""; }

double ProbeKind::initial_bound(const std::vector<ParameterSpec>& specs, size_t index) const {
  const ParameterSpec& spec = specs.at(index);
  // A Linear's weight: kaiming_uniform(a=sqrt(5)), U(+-1/sqrt(fan_in)); its bias, the spec after it, the same.
  if (spec.shape.size() == 2) return 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
  return 1.0 / std::sqrt(static_cast<double>(specs.at(index - 1).shape.at(1)));
}

void ProbeKind::describe(const ProbeShape&, Json&) const {}

at::Tensor ProbeKind::direction(const ProbeBank&, int64_t, int64_t) const {
  fail_input("the {} probe has no single direction in the layer's space (its score is not linear in the activations): "
             "steer with a linear, logistic or mean-diff probe, or a vector file",
             name());
}

void ProbeKind::read_shape(const Json&, const std::string&, ProbeShape&) const {}

void describe_token_reading(const ProbeShape& shape, Json& fields) {
  fields["max_tokens"] = shape.max_tokens;
  fields["skip_leading"] = shape.skip_leading;
}

void read_token_reading(const Json& index, const std::string& where, ProbeShape& shape) {
  shape.max_tokens = json_value<int64_t>(index, "max_tokens", 0, where);
  shape.skip_leading = json_value<int64_t>(index, "skip_leading", 0, where);
}

TrainActivations ProbeKind::forward_tokens(const ProbeBank&, const TokenBatch&) const {
  throw std::logic_error(std::string("probe kind '") + name() + "' reads one row per text, not every token");
}

at::Tensor ProbeKind::row_logits(const ProbeBank&, const at::Tensor&) const { return {}; }

at::Tensor ProbeKind::prefix_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& prefixes) const {
  return token_logits(bank, values, prefixes);
}

at::Tensor ProbeKind::token_weights(const ProbeBank&, const TrainActivations&) const {
  throw std::logic_error(std::string("probe kind '") + name() + "' has no attention over tokens");
}

std::vector<solvers::ProblemOutcome> ProbeKind::fit(ProbeBank&, const FitData&) const {
  throw std::logic_error(std::string("probe kind '") + name() + "' trains by gradient steps; it has no fit()");
}

Json ProbeKind::fitted_features(const ProbeBank&, int64_t) const { return Json(); }

at::Tensor FitData::sample_weights() const {
  return (pos_weight.unsqueeze(0) - 1.0) * targets + 1.0;
}

std::vector<ParameterSpec> parameter_specs(const ProbeShape& shape) { return shape.kind->parameters(shape); }

}  // namespace probekit::probes
