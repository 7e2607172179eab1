// The rolling monitor probe (the "max of rolling means" aggregation of the probes deployed on Gemini): each token's
// linear score, the mean over every window of --window-tokens (default 16) consecutive tokens of a text (one window
// of all its tokens when it is shorter), and the text's logit the highest window mean: a weighted sum of the scores
// with weight 1/W on the tokens of that window.
#include <fmt/format.h>

#include <limits>

#include "probes/kinds/kinds.h"
#include "probes/kinds/token_score_kind.h"

namespace probekit::probes {

namespace {

class RollingKind : public TokenScoreKind {
 public:
  const char* name() const override { return "rolling"; }
  std::string reference_class(bool) const override { return "RollingMeanProbe"; }
  std::vector<std::string> own_flags() const override { return {"--window-tokens", "--max-tokens"}; }

  std::string shape_problem(const ProbeShape& s) const override {
    if (s.window_tokens < 1) return fmt::format("--window-tokens must be positive, got {}", s.window_tokens);
    return "";
  }
  void describe(const ProbeShape& s, Json& fields) const override {
    fields["window_tokens"] = s.window_tokens;
    describe_token_reading(s, fields);
  }
  void read_shape(const Json& index, const std::string& where, ProbeShape& s) const override {
    s.window_tokens = json_value<int64_t>(index, "window_tokens", 16, where);
    read_token_reading(index, where, s);
  }

  at::Tensor aggregation_weights(const at::Tensor& scores, const at::Tensor& lengths,
                                 const ProbeShape& s) const override {
    const int64_t texts = scores.size(0), tokens = scores.size(1), columns = scores.size(2);
    at::Tensor sums = scores.nan_to_num(0.0).cumsum(1);
    at::Tensor before = at::cat({at::zeros({texts, 1, columns}, sums.options()), sums.narrow(1, 0, tokens - 1)}, 1);
    at::Tensor width = lengths.clamp_max(s.window_tokens).view({texts, 1});  // [B, 1]
    at::Tensor starts = at::arange(tokens, lengths.options()).view({1, tokens});
    at::Tensor ends = (starts + width - 1).clamp_max(tokens - 1);
    at::Tensor window_sums = sums.gather(1, ends.unsqueeze(2).expand({texts, tokens, columns})) - before;
    at::Tensor valid = (starts <= lengths.view({texts, 1}) - width).unsqueeze(2);
    at::Tensor widths = width.to(scores.scalar_type()).unsqueeze(2);
    at::Tensor means = (window_sums / widths).masked_fill(valid.logical_not(), std::numeric_limits<double>::quiet_NaN());
    at::Tensor best = means.nan_to_num(-std::numeric_limits<double>::infinity()).argmax(1, true);  // [B, 1, n]
    at::Tensor j = starts.unsqueeze(2);
    at::Tensor inside = (j >= best) & (j < best + width.unsqueeze(2));
    return inside.to(scores.scalar_type()) / widths;
  }
};

}  // namespace

std::unique_ptr<ProbeKind> make_rolling_kind() { return std::make_unique<RollingKind>(); }

}  // namespace probekit::probes
