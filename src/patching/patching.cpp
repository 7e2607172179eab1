#include "patching/patching.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/progress.h"
#include "readout/readout.h"

namespace probekit::patching {

namespace {

// One cell of the grids: indices into the request's sites and the result's layers and positions.
struct Cell {
  size_t site, layer, position;
};

// The base run's writes that attribution differentiates by: a zero added at each site of each layer, whose gradient
// is the metric's gradient with respect to that site's values.
struct ZeroWrites {
  model::StreamWrites writes;
  std::vector<std::pair<Site, int64_t>> keys;
  std::vector<at::Tensor> zeros;
};

ZeroWrites zero_writes(const model::TransformerModel& model, const model::StreamWrites& base, int64_t tokens,
                       const std::vector<Site>& sites) {
  ZeroWrites out{base, {}, {}};
  for (Site site : sites) {
    for (int64_t layer = 0; layer < model.loaded_layers(); ++layer) {
      at::Tensor zero = at::zeros({1, tokens, model.config().hidden_size},
                                  at::TensorOptions().dtype(at::kFloat).device(model.layer_device(layer)));
      zero.requires_grad_(true);
      out.writes.add(site, layer, zero);
      out.keys.emplace_back(site, layer);
      out.zeros.push_back(zero);
    }
  }
  return out;
}

int64_t rows_per_batch(const model::TransformerModel& model, const PatchRequest& request, int64_t tokens) {
  if (request.rows_per_batch > 0) return request.rows_per_batch;
  // Enough tokens a pass to fill a GPU; few rows on a CPU, where a bigger batch is not faster.
  const int64_t budget = model.device().is_cuda() ? 16384 : 1024;
  return std::clamp<int64_t>(budget / tokens, 1, 256);
}

// The metric of every cell, a batch of cells at a time: row b of a pass is the base run with cell b's patch.
void exact_grids(const model::TransformerModel& model, const std::vector<int32_t>& base_ids,
                 const model::StreamWrites& base_writes, const readout::SiteRun& source, const PatchRequest& request,
                 PatchingResult& result, ProgressBar& progress) {
  std::vector<Cell> cells;
  for (size_t s = 0; s < result.sites.size(); ++s) {
    result.sites[s].grid = at::zeros({static_cast<int64_t>(result.layers.size()), static_cast<int64_t>(result.positions.size())}, at::kDouble);
    for (size_t l = 0; l < result.layers.size(); ++l) {
      for (size_t p = 0; p < result.positions.size(); ++p) cells.push_back({s, l, p});
    }
  }
  const auto tokens = static_cast<int64_t>(base_ids.size());
  const auto rows = static_cast<size_t>(rows_per_batch(model, request, tokens));
  for (size_t first = 0; first < cells.size(); first += rows) {
    const size_t end = std::min(cells.size(), first + rows);
    std::map<std::pair<Site, int64_t>, at::Tensor> masks;
    for (size_t i = first; i < end; ++i) {
      const Cell& cell = cells[i];
      const Site site = request.sites[cell.site];
      for (int64_t layer : window_layers(result.layers[cell.layer], request.layer_window, model.loaded_layers())) {
        at::Tensor& mask = masks[{site, layer}];
        if (!mask.defined()) mask = at::zeros({static_cast<int64_t>(end - first), tokens}, at::kBool);
        mask.accessor<bool, 2>()[static_cast<int64_t>(i - first)][result.positions[cell.position]] = true;
      }
    }
    model::StreamWrites writes = base_writes;
    for (const auto& [key, mask] : masks) {
      const auto& [site, layer] = key;
      writes.patch(site, layer, source.values.at(site)[static_cast<size_t>(layer)], mask.to(model.layer_device(layer)));
    }
    const at::Tensor logits = readout::read_last_logits(model, base_ids, static_cast<int64_t>(end - first), writes);
    const at::Tensor values = result.metric(logits).to(at::kCPU, at::kDouble);
    const auto value = values.accessor<double, 1>();
    for (size_t i = first; i < end; ++i) {
      const Cell& cell = cells[i];
      result.sites[cell.site].grid.accessor<double, 2>()[static_cast<int64_t>(cell.layer)][static_cast<int64_t>(cell.position)] =
          value[static_cast<int64_t>(i - first)];
    }
    progress.update(static_cast<int64_t>(end));
  }
}

// Attribution patching: (source - base) . d metric / d value at every site, layer and position, from the gradient
// of the base run's metric (its graph recorded through `zeros`), summed over each cell's window.
void attribution_grids(const model::TransformerModel& model, const readout::SiteRun& base, const ZeroWrites& zeros,
                       const readout::SiteRun& source, const PatchRequest& request, PatchingResult& result) {
  const at::Tensor metric = result.metric(base.logits.unsqueeze(0))[0];
  const std::vector<at::Tensor> gradients = torch::autograd::grad({metric}, zeros.zeros, {}, false, false, true);
  // Each site and layer's [T] terms, computed on the device and brought to the host at once.
  std::vector<at::Tensor> terms;
  for (size_t i = 0; i < zeros.keys.size(); ++i) {
    const auto& [site, layer] = zeros.keys[i];
    const at::Tensor& source_values = source.values.at(site)[static_cast<size_t>(layer)];
    const at::Tensor& base_values = base.values.at(site)[static_cast<size_t>(layer)];
    terms.push_back(gradients[i].defined()
                        ? ((source_values.to(at::kFloat) - base_values.to(at::kFloat)) * gradients[i][0]).sum(-1).to(model.device())
                        : at::zeros({source_values.size(0)}, at::TensorOptions().device(model.device())));
  }
  const at::Tensor all_terms = at::stack(terms).to(at::kCPU, at::kDouble);  // [sites x layers, T]
  const auto term = all_terms.accessor<double, 2>();
  const int64_t layers = model.loaded_layers();
  for (size_t s = 0; s < result.sites.size(); ++s) {
    at::Tensor grid = at::zeros({static_cast<int64_t>(result.layers.size()), static_cast<int64_t>(result.positions.size())}, at::kDouble);
    auto cell = grid.accessor<double, 2>();
    for (size_t l = 0; l < result.layers.size(); ++l) {
      for (int64_t layer : window_layers(result.layers[l], request.layer_window, layers)) {
        for (size_t p = 0; p < result.positions.size(); ++p) {
          cell[static_cast<int64_t>(l)][static_cast<int64_t>(p)] += term[static_cast<int64_t>(s) * layers + layer][result.positions[p]];
        }
      }
    }
    result.sites[s].attribution = grid;
  }
}

void check_request(const PatchRequest& request, int64_t layers, int64_t tokens) {
  if (request.sites.empty()) fail_usage("--site: name at least one site");
  std::set<Site> seen;
  for (Site site : request.sites) {
    if (site != Site::kResidPost && site != Site::kAttnOut && site != Site::kMlpOut) {
      fail_usage("--site {}: patching takes resid_post, attn_out or mlp_out", site_name(site));
    }
    if (!seen.insert(site).second) fail_usage("--site: {} is named twice", site_name(site));
  }
  // A window's layers interact (a patch at layer l changes what layer l + 1 sees at that position), so the sum of
  // their first-order estimates is not the window's.
  if (request.attribution && request.layer_window > 1) {
    fail_usage("--layer-window {} with --method attribution: attribution patching estimates single layers' patches; "
               "use --method exact for a window", request.layer_window);
  }
  if (request.attribution && request.direction == Direction::kNoise && request.metric.kind == MetricKind::kKl) {
    fail_usage("--metric kl with --direction noise and --method attribution: the KL divergence's gradient at the clean "
               "run is zero, so attribution estimates nothing; use the exact grid or another metric");
  }
  for (int64_t layer : request.layers) {
    if (layer < 0 || layer >= layers) fail_usage("--layers: layer {} is outside the model's 0 to {}", layer, layers - 1);
  }
  for (int64_t position : request.positions) {
    if (position < 0 || position >= tokens) {
      fail_usage("--positions: position {} is outside the prompts' {} tokens (0 to {})", position, tokens, tokens - 1);
    }
  }
  if (request.layer_window < 1) fail_usage("--layer-window {}: must be 1 or more", request.layer_window);
  if (!request.exact && !request.attribution) fail_usage("--method: ask for exact, attribution or both");
}

// The base run (the one patched) and the source run (whose values are put in) of a pair, for a direction.
class PairRuns {
 public:
  PairRuns(const PromptPair& pair, Direction direction) : pair_(pair), denoise_(direction == Direction::kDenoise) {
    if (pair.noise.defined()) noise_.add(Site::kEmbeddings, -1, pair.noise.unsqueeze(0));
  }
  const std::vector<int32_t>& base_ids() const { return denoise_ ? pair_.corrupted : pair_.clean; }
  const std::vector<int32_t>& source_ids() const { return denoise_ ? pair_.clean : pair_.corrupted; }
  const model::StreamWrites& base_writes() const { return denoise_ ? noise_ : none_; }
  const model::StreamWrites& source_writes() const { return denoise_ ? none_ : noise_; }
  template <typename Runs>
  const at::Tensor& clean_logits(const Runs& runs) const { return denoise_ ? runs.source.logits : runs.base.logits; }
  template <typename Runs>
  const at::Tensor& corrupted_logits(const Runs& runs) const { return denoise_ ? runs.base.logits : runs.source.logits; }

 private:
  const PromptPair& pair_;
  bool denoise_;
  model::StreamWrites noise_, none_;
};

struct RunPair {
  readout::SiteRun base, source;
};

// Both runs read at the sites; with `gradients`, in autograd's arithmetic (the base's graph through `base_writes`).
RunPair read_runs(const model::TransformerModel& model, const PairRuns& pairing, const std::vector<Site>& sites,
                  const model::StreamWrites& base_writes, bool gradients) {
  return {readout::read_site_run(model, pairing.base_ids(), sites, &base_writes, gradients),
          readout::read_site_run(model, pairing.source_ids(), sites, &pairing.source_writes(), gradients)};
}

// The metric resolved on the two runs, and its value on each; non-finite values are refused.
void resolve_metrics(const at::Tensor& clean_logits, const at::Tensor& corrupted_logits, const PatchRequest& request,
                     const tokenizer::Tokenizer& tokenizer, PatchingResult& result) {
  result.metric = resolve_metric(request.metric, clean_logits.detach(), corrupted_logits.detach(), tokenizer);
  result.clean_metric = result.metric(clean_logits.detach().unsqueeze(0))[0].item<double>();
  result.corrupted_metric = result.metric(corrupted_logits.detach().unsqueeze(0))[0].item<double>();
  if (!std::isfinite(result.clean_metric) || !std::isfinite(result.corrupted_metric)) {
    fail_input("the metric is not finite (clean {}, corrupted {}): the model's logits hold NaN or Inf", result.clean_metric,
               result.corrupted_metric);
  }
  if (result.clean_metric == result.corrupted_metric) {
    spdlog::warn("the clean and corrupted runs give the same metric ({}): `restored` has nothing to divide by and is null",
                 result.clean_metric);
  }
}

std::vector<int64_t> all_below(int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

}  // namespace

std::vector<int64_t> window_layers(int64_t layer, int64_t window, int64_t layers) {
  std::vector<int64_t> out;
  for (int64_t l = layer - window / 2; l < layer - window / 2 + window; ++l) {
    if (l >= 0 && l < layers) out.push_back(l);
  }
  return out;
}

PatchingResult run_patching(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                            const PromptPair& pair, const PatchRequest& request) {
  const auto tokens = static_cast<int64_t>(pair.clean.size());
  check_request(request, model.loaded_layers(), tokens);
  const auto start = std::chrono::steady_clock::now();
  PatchingResult result;
  result.layers = request.layers.empty() ? all_below(model.loaded_layers()) : request.layers;
  result.positions = request.positions.empty() ? all_below(tokens) : request.positions;
  for (Site site : request.sites) result.sites.push_back({site, {}, {}});

  const PairRuns pairing(pair, request.direction);
  // The exact grid and the metrics come from plain passes (the fused kernels, where they serve); attribution reads
  // both runs with autograd's arithmetic, so that source - base is zero wherever the prompts agree.
  std::optional<RunPair> plain, attributed;
  std::optional<ZeroWrites> zeros;
  if (request.exact) plain = read_runs(model, pairing, request.sites, pairing.base_writes(), false);
  // Gradients whatever the caller's mode: the zeros are leaves of the graph.
  c10::InferenceMode not_inference(false);
  at::AutoGradMode gradient_mode(request.attribution);
  if (request.attribution) {
    zeros = zero_writes(model, pairing.base_writes(), tokens, request.sites);
    attributed = read_runs(model, pairing, request.sites, zeros->writes, true);
  }
  const RunPair& measured = plain ? *plain : *attributed;
  resolve_metrics(pairing.clean_logits(measured), pairing.corrupted_logits(measured), request, tokenizer, result);

  const auto cells = static_cast<int64_t>(request.sites.size() * result.layers.size() * result.positions.size());
  ProgressBar progress("patching", request.exact ? cells : 0, "cells");
  if (attributed) attribution_grids(model, attributed->base, *zeros, attributed->source, request, result);
  if (plain) exact_grids(model, pairing.base_ids(), pairing.base_writes(), plain->source, request, result, progress);
  progress.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace probekit::patching
