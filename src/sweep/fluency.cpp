#include "sweep/fluency.h"

#include <cmath>

namespace probekit::sweep {

namespace {

Fluency row_fluency(const at::Tensor& steered, const at::Tensor& unsteered, const readout::Sequence& tokens) {
  Fluency f;
  const at::Tensor kl = (steered.exp() * (steered - unsteered)).sum(-1).clamp_min(0).to(at::kCPU, at::kDouble);
  const at::Tensor ids = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong).to(unsteered.device());
  const double mean_nll = -unsteered.gather(1, ids.unsqueeze(1)).mean().item<double>();
  f.kl.assign(kl.data_ptr<double>(), kl.data_ptr<double>() + kl.numel());
  for (double step : f.kl) f.kl_mean += step / static_cast<double>(f.kl.size());
  f.perplexity = std::exp(mean_nll);
  return f;
}

}  // namespace

std::vector<Fluency> measure_fluency(const model::TransformerModel& model, const std::vector<readout::Sequence>& prompts,
                                     const std::vector<readout::Sequence>& generated,
                                     const std::vector<const steering::SteeringVectors*>& steering, size_t rows_per_pass) {
  std::vector<Fluency> fluency;
  for (size_t first = 0; first < prompts.size(); first += rows_per_pass) {
    const size_t end = std::min(prompts.size(), first + rows_per_pass);
    std::vector<readout::Sequence> texts;
    std::vector<int64_t> from;
    for (size_t r = first; r < end; ++r) {
      texts.push_back(prompts[r]);
      texts.back().insert(texts.back().end(), generated[r].begin(), generated[r].end());
      from.push_back(static_cast<int64_t>(prompts[r].size()) - 1);
    }
    const std::vector<const steering::SteeringVectors*> rows(steering.begin() + static_cast<std::ptrdiff_t>(first),
                                                             steering.begin() + static_cast<std::ptrdiff_t>(end));
    const model::StreamWrites writes = steering::place_rows(rows, model);
    const std::vector<at::Tensor> unsteered = readout::read_next_token_log_probs(model, texts, from);
    const std::vector<at::Tensor> steered =
        writes.empty() ? unsteered : readout::read_next_token_log_probs(model, texts, from, &writes);
    for (size_t r = first; r < end; ++r) fluency.push_back(row_fluency(steered[r - first], unsteered[r - first], generated[r]));
  }
  return fluency;
}

}  // namespace probekit::sweep
