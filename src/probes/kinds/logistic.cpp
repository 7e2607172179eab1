// L2-regularised logistic regression fitted as scikit-learn's LogisticRegression(C, solver="lbfgs") fits it
// (solvers/logistic.h): one-vs-rest, the K problems of a bank fitted together, each to its own convergence; in
// a multiclass bank one multinomial problem, sklearn's default for more than two classes. Stored and scored as a
// linear probe (linear.weight, linear.bias; the reference's BinaryLinearProbe / LinearProbe).
#include "probes/kinds/linear_kind.h"
#include "probes/probe_bank.h"
#include "probes/solvers/logistic.h"

namespace probekit::probes {

namespace {

class LogisticKind : public LinearKind {
 public:
  const char* name() const override { return "logistic"; }
  bool fits_directly() const override { return true; }

  std::vector<solvers::ProblemOutcome> fit(ProbeBank& bank, const FitData& data) const override {
    const int64_t outputs = bank.shape().outputs;
    solvers::LogisticFit fit =
        outputs == 1
            ? solvers::fit_binary_logistic({data.inputs, data.targets, data.sample_weights(), data.C}, data.solver)
            : solvers::fit_multinomial_logistic(data.inputs, data.targets, outputs, data.C, data.solver);
    store(bank, fit.weight, fit.bias);
    return fit.problems;
  }
};

}  // namespace

std::unique_ptr<ProbeKind> make_logistic_kind() { return std::make_unique<LogisticKind>(); }

}  // namespace probekit::probes
