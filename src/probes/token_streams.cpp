#include "probes/token_streams.h"

#include <fmt/format.h>

#include <algorithm>

#include "device/torch/row_stable.h"
#include "probes/token_rows.h"
#include "probes/training_data.h"

namespace probekit::probes {

namespace {

// The highest of each text's rows of `scores` [n, K], the texts' `counts` rows one after another: [texts, K].
at::Tensor maxima_by_text(const at::Tensor& scores, const std::vector<int64_t>& counts) {
  std::vector<at::Tensor> maxima;
  int64_t start = 0;
  for (int64_t count : counts) {
    maxima.push_back(std::get<0>(scores.narrow(0, start, count).max(0)));
    start += count;
  }
  return at::stack(maxima);
}

// Each text's own scores [R, K]: the rows after its first `skip` (a text of those only, its last row).
at::Tensor own_maxima(const at::Tensor& scores, const std::vector<int64_t>& offsets, int64_t skip) {
  std::vector<int64_t> kept, counts;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t from = first_read_row(offsets[e], offsets[e + 1], skip);
    for (int64_t row = from; row < offsets[e + 1]; ++row) kept.push_back(row);
    counts.push_back(offsets[e + 1] - from);
  }
  return maxima_by_text(scores.index_select(0, at::tensor(kept, at::kLong).to(scores.device())), counts);
}

// One split's maxima [texts, K] as logits.
at::Tensor split_maxima(const ProbeSet& set, const activations::SplitData& split, int64_t skip) {
  const at::Tensor rows = at::from_blob(const_cast<float*>(split.activations.data()), {split.rows, split.hidden}, at::kFloat);
  if (!set.shape().kind->reads_every_token()) return own_maxima(set.logits(rows), split.offsets, skip);
  const at::Tensor own = set.row_logits(rows);
  if (own.defined()) return own_maxima(own, split.offsets, set.shape().skip_leading);
  std::vector<int64_t> counts;
  return maxima_by_text(set.prefix_logits(rows, split.offsets, counts), counts);
}

}  // namespace

std::string token_stream_problem(const ProbeSet& set, const activations::ActivationFile& file) {
  const activations::ReadoutRecipe& probes = set.recipe();
  if (file.attributes.recipe.position != Position::kAll) {
    return "the capture holds one row per text; a --position all capture holds every token";
  }
  if (!probes.prompt_suffix.empty()) {
    return "the probes read a prompt suffix after the text, and a monitor scores each token as the text up to it "
           "followed by the suffix, which no capture holds";
  }
  if (!set.shape().kind->reads_every_token() && probes.position != Position::kLast) {
    return fmt::format("{} probes of position {} score a text's tokens together, not each token as its last",
                       set.shape().kind->name(), position_name(probes.position));
  }
  return "";
}

at::Tensor token_stream_maxima(const ProbeSet& set, const activations::ActivationFile& file) {
  // A per-row probe reads a text's last token: no prefix ends at the tokenizer's leading specials.
  const int64_t skip = leading_specials(file);
  std::vector<at::Tensor> parts;
  for (const activations::SplitData& split : file.splits) {
    if (split.examples() > 0) parts.push_back(split_maxima(set, split, skip));
  }
  return device::row_stable_sigmoid(at::cat(parts).to(at::kCPU, at::kFloat));
}

}  // namespace probekit::probes
