// The ema monitor probe (the exponential-moving-average aggregation of the probes deployed on Gemini): each token's
// linear score s_i, their moving average e_0 = s_0, e_i = alpha s_i + (1 - alpha) e_{i-1} (--ema-alpha, default
// 0.1), and the text's logit the highest e_i. That e_i is a weighted sum of the scores up to i, with weights
// (1 - alpha)^i for s_0 and alpha (1 - alpha)^(i - j) for s_j, j >= 1, which sum to 1.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "probes/kinds/kinds.h"
#include "probes/kinds/token_score_kind.h"

namespace probekit::probes {

namespace {

class EmaKind : public TokenScoreKind {
 public:
  const char* name() const override { return "ema"; }
  std::string reference_class(bool) const override { return "EmaProbe"; }
  std::vector<std::string> own_flags() const override { return {"--ema-alpha", "--max-tokens"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (!(s.ema_alpha > 0.0 && s.ema_alpha <= 1.0)) return fmt::format("--ema-alpha must be in (0, 1], got {}", s.ema_alpha);
    return "";
  }
  void describe(const ProbeShape& s, Json& fields) const override {
    fields["ema_alpha"] = s.ema_alpha;
    describe_token_reading(s, fields);
  }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.ema_alpha = json_value<double>(index, "ema_alpha", 0.1, where);
    read_token_reading(index, where, s);
  }

  at::Tensor aggregation_weights(const at::Tensor& scores, const at::Tensor&, const ProbeShape& s) const override {
    const int64_t tokens = scores.size(1);
    const double alpha = s.ema_alpha;
    // The averages token by token (NaN past a text's end stays NaN: never the highest).
    std::vector<at::Tensor> averages = {scores.select(1, 0)};
    for (int64_t t = 1; t < tokens; ++t) averages.push_back(alpha * scores.select(1, t) + (1.0 - alpha) * averages.back());
    at::Tensor best = at::stack(averages, 1).nan_to_num(-std::numeric_limits<double>::infinity()).argmax(1, true);
    at::Tensor j = at::arange(tokens, best.options()).view({1, tokens, 1});
    at::Tensor steps = (best - j).to(scores.scalar_type());  // i* - j
    at::Tensor decay = at::pow(1.0 - alpha, steps.clamp_min(0));
    at::Tensor weights = at::where(j == 0, decay, alpha * decay);
    return weights * (steps >= 0).to(scores.scalar_type());
  }
};

}  // namespace

std::unique_ptr<ProbeKind> make_ema_kind() { return std::make_unique<EmaKind>(); }

}  // namespace probekit::probes
