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

ZeroWrites zero_writes(const model::TransformerModel& model, const model::StreamWrites& base, int64_t rows,
                       int64_t tokens, const std::vector<Site>& sites) {
  ZeroWrites out{base, {}, {}};
  for (Site site : sites) {
    for (int64_t layer = 0; layer < model.loaded_layers(); ++layer) {
      at::Tensor zero = at::zeros({rows, tokens, model.config().hidden_size},
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

// Attribution's inputs, tensors on the model's device as a captured pass takes them: the base and the source run's
// ids as rows 0 and 1 [2, T], their embeddings' noise [2, T, hidden] (undefined: none) and the tokens the metric
// names [2] (-1: none).
enum AttributionInput : size_t { kRunIds, kRunNoise, kNamedTokens };
// Its outputs: each site and layer's terms [sites x layers, T] (fp32), both runs' next-token logits, the metric's
// token ids [2].
enum AttributionOutput : size_t { kTerms, kBaseLogits, kSourceLogits, kTokenIds };

// Attribution patching: (source - base) . d metric / d value at every site, layer and position, from the gradient
// of the base run's metric (its graph recorded through zeros added at every site). Both runs are rows of one pass in
// autograd's arithmetic, so that source - base is zero wherever the prompts agree and the weights are read once for
// the two. No host synchronisation: a CUDA graph can hold the pass and its backward.
std::vector<at::Tensor> attribution_pass(const model::TransformerModel& model, const PatchRequest& request,
                                         const std::vector<at::Tensor>& in) {
  model::StreamWrites noise;
  if (in[kRunNoise].defined()) noise.add(Site::kEmbeddings, -1, in[kRunNoise]);
  const ZeroWrites zeros = zero_writes(model, noise, 2, in[kRunIds].size(1), request.sites);
  const std::vector<readout::SiteRun> runs = readout::read_site_runs(model, in[kRunIds], request.sites, &zeros.writes, true);
  const readout::SiteRun& base = runs[0];
  const readout::SiteRun& source = runs[1];
  const bool denoise = request.direction == Direction::kDenoise;
  const at::Tensor clean = (denoise ? source : base).logits.detach();
  const at::Tensor corrupted = (denoise ? base : source).logits.detach();
  const MetricKind kind = request.metric.kind;
  const at::Tensor token_ids = resolve_token_ids(kind, in[kNamedTokens], clean, corrupted);
  const at::Tensor clean_log_probs = kind == MetricKind::kKl ? at::log_softmax(clean, -1) : at::Tensor();
  const at::Tensor metric = metric_values(kind, base.logits.unsqueeze(0), token_ids, clean_log_probs)[0];
  const std::vector<at::Tensor> gradients = torch::autograd::grad({metric}, zeros.zeros, {}, false, false, true);
  std::vector<at::Tensor> terms;
  for (size_t i = 0; i < zeros.keys.size(); ++i) {
    const auto& [site, layer] = zeros.keys[i];
    const at::Tensor& source_values = source.values.at(site)[static_cast<size_t>(layer)];
    const at::Tensor& base_values = base.values.at(site)[static_cast<size_t>(layer)];
    terms.push_back(gradients[i].defined()
                        ? ((source_values.to(at::kFloat) - base_values.to(at::kFloat)) * gradients[i][0]).sum(-1).to(model.device())
                        : at::zeros({source_values.size(0)}, at::TensorOptions().device(model.device())));
  }
  return {at::stack(terms), base.logits.detach(), source.logits.detach(), token_ids};
}

// Each cell's estimate from the terms [sites x layers, T]: a cell's window sums its layers' terms.
// Positions before `first_difference` hold the same values in both runs (the model is causal): their terms are the
// two batch rows' rounding, not an effect, and are left at 0.
void attribution_grids(const model::TransformerModel& model, const at::Tensor& terms, const PatchRequest& request,
                       int64_t first_difference, PatchingResult& result) {
  const at::Tensor all_terms = terms.to(at::kCPU, at::kDouble);
  const auto term = all_terms.accessor<double, 2>();
  const int64_t layers = model.loaded_layers();
  for (size_t s = 0; s < result.sites.size(); ++s) {
    at::Tensor grid = at::zeros({static_cast<int64_t>(result.layers.size()), static_cast<int64_t>(result.positions.size())}, at::kDouble);
    auto cell = grid.accessor<double, 2>();
    for (size_t l = 0; l < result.layers.size(); ++l) {
      for (int64_t layer : window_layers(result.layers[l], request.layer_window, layers)) {
        for (size_t p = 0; p < result.positions.size(); ++p) {
          if (result.positions[p] < first_difference) continue;
          cell[static_cast<int64_t>(l)][static_cast<int64_t>(p)] += term[static_cast<int64_t>(s) * layers + layer][result.positions[p]];
        }
      }
    }
    result.sites[s].attribution = grid;
  }
}

void check_request(const PatchRequest& request, int64_t layers, int64_t tokens) {
  check_request_flags(request);
  for (int64_t layer : request.layers) {
    if (layer < 0 || layer >= layers) fail_usage("--layers: layer {} is outside the model's 0 to {}", layer, layers - 1);
  }
  for (int64_t position : request.positions) {
    if (position < 0 || position >= tokens) {
      fail_usage("--positions: position {} is outside the prompts' {} tokens (0 to {})", position, tokens, tokens - 1);
    }
  }
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
  /// The noise on the embeddings of the base and the source run as rows 0 and 1 [2, T, hidden], or undefined.
  at::Tensor run_noise() const {
    if (!pair_.noise.defined()) return {};
    const at::Tensor none = at::zeros_like(pair_.noise);
    return denoise_ ? at::stack({pair_.noise, none}) : at::stack({none, pair_.noise});
  }
  const at::Tensor& clean(const at::Tensor& base, const at::Tensor& source) const { return denoise_ ? source : base; }
  const at::Tensor& corrupted(const at::Tensor& base, const at::Tensor& source) const { return denoise_ ? base : source; }

 private:
  const PromptPair& pair_;
  bool denoise_;
  model::StreamWrites noise_, none_;
};

struct RunPair {
  readout::SiteRun base, source;
};

// Both runs read at the sites, by plain passes (the fused kernels where they serve).
RunPair read_runs(const model::TransformerModel& model, const PairRuns& pairing, const std::vector<Site>& sites) {
  return {readout::read_site_run(model, pairing.base_ids(), sites, &pairing.base_writes()),
          readout::read_site_run(model, pairing.source_ids(), sites, &pairing.source_writes())};
}

// attribution_pass's outputs for the pair, the metric reading `named_tokens` [2] where they are >= 0; replayed as a
// CUDA graph from `graphs` when given (a pair of the same shape as the last).
std::vector<at::Tensor> attribution_outputs(const model::TransformerModel& model, const PairRuns& pairing,
                                            const PatchRequest& request, const at::Tensor& named_tokens,
                                            readout::StepGraphs* graphs) {
  std::vector<int64_t> ids;
  for (const auto* run : {&pairing.base_ids(), &pairing.source_ids()}) {
    readout::check_runnable(model, *run);
    ids.insert(ids.end(), run->begin(), run->end());
  }
  const at::Tensor noise = pairing.run_noise();
  const std::vector<at::Tensor> inputs = {at::tensor(ids, at::kLong).view({2, -1}).to(model.device()), noise,
                                          named_tokens.to(model.device(), at::kLong)};
  const auto body = [&](const std::vector<at::Tensor>& in) { return attribution_pass(model, request, in); };
  // A graph keeps its pass's memory (every layer's values saved for the backward) while it lives: pairs longer than
  // this run eagerly, where the GPU's arithmetic, not the host's launches, takes most of the time anyway.
  constexpr size_t kLongestGraphedPair = 128;
  if (graphs == nullptr || pairing.base_ids().size() > kLongestGraphedPair) return body(inputs);
  // The sites in their order: the graph stacks its terms in the order of the request it captured.
  readout::StepGraphs::Key key = {static_cast<int64_t>(pairing.base_ids().size()),
                                  static_cast<int64_t>(request.metric.kind), static_cast<int64_t>(request.direction),
                                  noise.defined()};
  for (Site site : request.sites) key.push_back(static_cast<int64_t>(site));
  return graphs->run(key, inputs, body);
}

// The resolved metric's value on the two runs; non-finite values are refused, blaming --noise where only the noised
// run's are (noise of 1e39 standard deviations is a finite double, but overflows the model's float32 norms).
void measure_metrics(const at::Tensor& clean_logits, const at::Tensor& corrupted_logits, double noise_std,
                     PatchingResult& result) {
  result.clean_metric = result.metric(clean_logits.detach().unsqueeze(0))[0].item<double>();
  result.corrupted_metric = result.metric(corrupted_logits.detach().unsqueeze(0))[0].item<double>();
  if (noise_std > 0 && std::isfinite(result.clean_metric) && !std::isfinite(result.corrupted_metric)) {
    fail_usage("--noise: the noised run's logits hold NaN or Inf: noise of standard deviation {:g} on the subject's "
               "embeddings overflows the model's float32 arithmetic; give a smaller --noise",
               noise_std);
  }
  if (!std::isfinite(result.clean_metric) || !std::isfinite(result.corrupted_metric)) {
    fail_input("the metric is not finite (clean {}, corrupted {}): the model's logits hold NaN or Inf", result.clean_metric,
               result.corrupted_metric);
  }
  if (result.metrics_agree()) {
    spdlog::warn("the clean and corrupted runs give the same metric (clean {}, corrupted {}): `restored` has nothing to "
                 "divide by and is null", result.clean_metric, result.corrupted_metric);
  }
}

// The first position whose token (or noise) differs between the runs; the prompt's length where none does.
int64_t first_difference(const PromptPair& pair) {
  if (pair.noise.defined()) {
    return pair.noised_positions.empty() ? static_cast<int64_t>(pair.clean.size())
                                         : *std::min_element(pair.noised_positions.begin(), pair.noised_positions.end());
  }
  const auto differ = std::mismatch(pair.clean.begin(), pair.clean.end(), pair.corrupted.begin());
  return static_cast<int64_t>(differ.first - pair.clean.begin());
}

std::vector<int64_t> all_below(int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

}  // namespace

const std::vector<Site>& patch_sites() {
  static const std::vector<Site> sites = {Site::kResidPost, Site::kAttnOut, Site::kMlpOut};
  return sites;
}

std::string patch_site_names() {
  const std::vector<Site>& sites = patch_sites();
  std::string names;
  for (size_t i = 0; i < sites.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == sites.size() ? " or " : ", ") + std::string(site_name(sites[i]));
  }
  return names;
}

void check_request_flags(const PatchRequest& request) {
  if (request.sites.empty()) fail_usage("--site: name at least one site");
  std::set<Site> seen;
  for (Site site : request.sites) {
    if (std::find(patch_sites().begin(), patch_sites().end(), site) == patch_sites().end()) {
      // One that is read only is said to be (regression: ln2_normalized was refused without saying why).
      fail_usage("--site {}: patching takes {}{}", site_name(site), patch_site_names(),
                 site_row(site).writable() ? "" : " (this site is read, never written: a patch writes its values)");
    }
    if (!seen.insert(site).second) fail_usage("--site: {} is named twice", site_name(site));
  }
  if (request.layer_window < 1) fail_usage("--layer-window {}: must be 1 or more", request.layer_window);
  // A window's layers interact (a patch at layer l changes what layer l + 1 sees at that position), so the sum of
  // their first-order estimates is not the window's.
  if (request.attribution && request.layer_window > 1) {
    fail_usage("--layer-window {} with --method {}: attribution patching estimates single layers' patches; "
               "use --method exact for a window", request.layer_window, request.exact ? "both" : "attribution");
  }
  if (request.attribution && request.direction == Direction::kNoise && request.metric.kind == MetricKind::kKl) {
    fail_usage("--metric kl with --direction noise and --method attribution: the KL divergence's gradient at the clean "
               "run is zero, so attribution estimates nothing; use the exact grid or another metric");
  }
  if (!request.exact && !request.attribution) fail_usage("--method: ask for exact, attribution or both");
}

std::vector<int64_t> window_layers(int64_t layer, int64_t window, int64_t layers) {
  // Bounded by the model's layers first: a window may be far wider than the model.
  const int64_t first = std::max<int64_t>(0, layer - window / 2);
  const int64_t last = std::min<int64_t>(layers - 1, layer - window / 2 + window - 1);
  std::vector<int64_t> out;
  for (int64_t l = first; l <= last; ++l) out.push_back(l);
  return out;
}

bool PatchingResult::metrics_agree() const {
  // Probabilities and KL divergences may be tiny and still differ many times over: no floor for them.
  const double floor = metric.kind == MetricKind::kLogitDiff ? 1.0 : 0.0;
  return same_runs ||
         std::abs(clean_metric - corrupted_metric) <= 1e-5 * std::max({floor, std::abs(clean_metric), std::abs(corrupted_metric)});
}

PatchingResult run_patching(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                            const PromptPair& pair, const PatchRequest& request, readout::StepGraphs* graphs) {
  const auto tokens = static_cast<int64_t>(pair.clean.size());
  check_request(request, model.loaded_layers(), tokens);
  const auto start = std::chrono::steady_clock::now();
  PatchingResult result;
  result.layers = request.layers.empty() ? all_below(model.loaded_layers()) : request.layers;
  result.positions = request.positions.empty() ? all_below(tokens) : request.positions;
  for (Site site : request.sites) result.sites.push_back({site, {}, {}});

  const PairRuns pairing(pair, request.direction);
  // The tokens the metric names are checked before any pass runs.
  const at::Tensor named = named_token_ids(request.metric, tokenizer, model.config().vocab_size);
  // The exact grid and the metric come from plain passes (the fused kernels, where they serve); attribution runs
  // its own in autograd's arithmetic, reading the exact grid's tokens when there is one.
  std::optional<RunPair> plain;
  std::vector<at::Tensor> attributed;
  if (request.exact) {
    plain = read_runs(model, pairing, request.sites);
    const at::Tensor& clean = pairing.clean(plain->base.logits, plain->source.logits);
    const at::Tensor token_ids =
        resolve_token_ids(request.metric.kind, named, clean, pairing.corrupted(plain->base.logits, plain->source.logits));
    result.metric = resolved_metric(request.metric.kind, token_ids, clean, tokenizer);
  }
  if (request.attribution) {
    // Gradients whatever the caller's mode: the zeros are leaves of the graph.
    c10::InferenceMode not_inference(false);
    at::AutoGradMode gradient_mode(true);
    attributed = attribution_outputs(model, pairing, request, plain ? result.metric.token_ids : named, graphs);
    if (!plain) {
      result.metric = resolved_metric(request.metric.kind, attributed[kTokenIds],
                                      pairing.clean(attributed[kBaseLogits], attributed[kSourceLogits]), tokenizer);
    }
  }
  const int64_t first_change = first_difference(pair);
  result.same_runs = first_change == tokens;
  const at::Tensor& base_logits = plain ? plain->base.logits : attributed[kBaseLogits];
  const at::Tensor& source_logits = plain ? plain->source.logits : attributed[kSourceLogits];
  measure_metrics(pairing.clean(base_logits, source_logits), pairing.corrupted(base_logits, source_logits),
                  pair.noise_std, result);

  const auto cells = static_cast<int64_t>(request.sites.size() * result.layers.size() * result.positions.size());
  ProgressBar progress("patching", cells, "cells");
  if (request.attribution) attribution_grids(model, attributed[kTerms], request, first_change, result);
  if (plain) {
    exact_grids(model, pairing.base_ids(), pairing.base_writes(), plain->source, request, result, progress);
  } else {
    progress.update(cells);  // attribution alone: every cell came from its one backward pass
  }
  progress.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace probekit::patching
