// The difference-of-means probe: its direction d is the mean of the label's train rows minus the mean of the
// other train rows, and a one-dimensional logistic fit of the projections p = d.x on the train split (the same
// L2 penalty and C as the logistic kind, on the scale only) gives the scale a and bias b that turn the
// projection into a probability. Stored as a linear probe: weight a d, bias b. One-vs-rest only.
#include "probes/kinds/linear_kind.h"
#include "probes/probe_bank.h"
#include "probes/solvers/logistic.h"

namespace probekit::probes {

namespace {

class MeanDiffKind : public LinearKind {
 public:
  const char* name() const override { return "mean-diff"; }
  bool fits_directly() const override { return true; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.outputs == 1) return "";
    return "mean-diff probes are one-vs-rest (one direction per label against the rest) and have no multiclass "
           "form: train them with train_binary_probes, or use --model-type logistic for a multiclass fit";
  }

  std::vector<solvers::ProblemOutcome> fit(ProbeBank& bank, const FitData& data) const override {
    at::Tensor x = data.inputs.to(at::kDouble);  // [N, H]
    const at::Tensor& positive = data.targets;  // [N, K]
    at::Tensor negative = 1.0 - positive;
    // [K, H]: each label's mean row minus the mean row of the rest.
    at::Tensor direction = at::mm(positive.t(), x) / positive.sum(0).unsqueeze(1) -
                           at::mm(negative.t(), x) / negative.sum(0).unsqueeze(1);
    at::Tensor projections = at::mm(x, direction.t());  // [N, K]
    solvers::LogisticFit scale =
        solvers::fit_scalar_logistic({projections, positive, data.sample_weights(), data.C}, data.solver);
    store(bank, scale.weight * direction, scale.bias);
    return scale.problems;
  }
};

}  // namespace

std::unique_ptr<ProbeKind> make_mean_diff_kind() { return std::make_unique<MeanDiffKind>(); }

}  // namespace probekit::probes
