// Sparse probing (Gurnee et al. 2023; Kantamneni et al. 2025, "Are Sparse Autoencoders Useful?"): for each label,
// keep the k input columns (an SAE's latents, or any activations) whose class means differ the most on the train
// split, |mean over the label's rows - mean over the rest|, and fit the logistic kind's L2-regularised regression on
// those columns only (--k, default 16). Stored and scored as a linear probe whose other weights are zero; each
// probe's metrics name the columns it kept.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "probes/kinds/linear_kind.h"
#include "probes/probe_bank.h"
#include "probes/solvers/logistic.h"

namespace probekit::probes {

namespace {

class SparseLogisticKind : public LinearKind {
 public:
  const char* name() const override { return "sparse-logistic"; }
  bool fits_directly() const override { return true; }
  std::vector<std::string> own_flags() const override { return {"--k", "--C"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.sparse_k < 1) return fmt::format("--k must be at least 1, got {}", s.sparse_k);
    if (s.outputs == 1) return "";
    return "sparse-logistic probes are one-vs-rest (the columns are chosen per label) and have no multiclass form: "
           "train them with train_binary_probes";
  }
  void describe(const ProbeShape& s, Json& fields) const override { fields["k"] = s.sparse_k; }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.sparse_k = json_value<int64_t>(index, "k", 16, where);
  }

  std::vector<solvers::ProblemOutcome> fit(ProbeBank& bank, const FitData& data) const override {
    const at::Tensor x = data.inputs.to(at::kDouble);  // [N, H]
    const at::Tensor& positive = data.targets;         // [N, K]
    const at::Tensor negative = 1.0 - positive;
    const at::Tensor separation = (at::mm(positive.t(), x) / positive.sum(0).unsqueeze(1).clamp_min(1) -
                                   at::mm(negative.t(), x) / negative.sum(0).unsqueeze(1).clamp_min(1))
                                      .abs();  // [K, H]
    const int64_t kept = std::min(bank.shape().sparse_k, x.size(1));
    // Regression: a --k past the width trained plain logistic probes without a word.
    if (bank.shape().sparse_k > x.size(1)) {
      spdlog::warn("--k {} is more than the activations' {} columns: every column is kept, as a logistic probe keeps "
                   "them", bank.shape().sparse_k, x.size(1));
    }
    const at::Tensor columns = std::get<1>(separation.topk(kept, 1));  // [K, k]
    const at::Tensor sample_weights = data.sample_weights();
    at::Tensor weight = at::zeros({positive.size(1), x.size(1)}, x.options());
    at::Tensor bias = at::zeros({positive.size(1)}, x.options());
    std::vector<solvers::ProblemOutcome> outcomes;
    for (int64_t p = 0; p < positive.size(1); ++p) {
      const at::Tensor chosen = columns[p];
      const solvers::LogisticFit fit = solvers::fit_binary_logistic(
          {data.inputs.index_select(1, chosen), positive.narrow(1, p, 1), sample_weights.narrow(1, p, 1), data.C},
          data.solver);
      weight[p].index_copy_(0, chosen, fit.weight.reshape({-1}).to(x.scalar_type()));
      bias[p] = fit.bias.reshape({}).to(x.scalar_type());
      outcomes.push_back(fit.problems.at(0));
    }
    store(bank, weight, bias);
    return outcomes;
  }

  Json fitted_features(const ProbeBank& bank, int64_t probe) const override {
    const at::Tensor weight = bank.parameter(kWeight)[probe].reshape({-1}).to(at::kCPU).to(at::kDouble);
    const at::Tensor nonzero = weight.nonzero().reshape({-1});
    const at::Tensor order = weight.index_select(0, nonzero).abs().argsort(0, true);
    Json kept = Json::array();
    for (int64_t i = 0; i < order.size(0); ++i) {
      const int64_t column = nonzero[order[i].item<int64_t>()].item<int64_t>();
      kept.push_back({{"index", column}, {"weight", weight[column].item<double>()}});
    }
    return kept;
  }
};

}  // namespace

std::unique_ptr<ProbeKind> make_sparse_logistic_kind() { return std::make_unique<SparseLogisticKind>(); }

}  // namespace probekit::probes
