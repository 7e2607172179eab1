// Activation patching: run one prompt (the base run) with the value of a site at one (layer, position) replaced by
// the value another prompt's run (the source run) had there, and measure how much of the answer comes back. Denoise
// (the default) patches the clean run's values into the corrupted run; noise the corrupted run's into the clean run.
// The grid's cells ride as rows of batched passes through the readout layer's writes; attribution patching
// estimates every cell at once from one backward pass, (source - base) . d metric / d value.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "patching/metric.h"
#include "readout/step_graphs.h"
#include "sites/sites.h"
#include "tokenizer/tokenizer.h"

namespace probekit::patching {

enum class Direction { kDenoise, kNoise };

/// ROME's corruption: Gaussian noise added to the subject's tokens' embeddings in the corrupted run.
struct NoiseCorruption {
  std::string subject;  // text inside the clean prompt
  double scale = 3.0;   // the noise's standard deviation in units of the embeddings' (TransformerModel::embedding_std)
  uint64_t seed = 0;
};

/// The two runs compared: the same token count, and with ROME's corruption the noise of the corrupted run.
struct PromptPair {
  std::vector<int32_t> clean, corrupted;  // with noise, the same ids
  at::Tensor noise;                       // [T, hidden] fp32 on the model's device; undefined: none
  std::vector<int64_t> noised_positions;  // the subject's tokens
  double noise_std = 0;                   // the noise's standard deviation
};

/// Both prompts tokenized as `inspect_model generate --text` does (special tokens, no template); different token
/// counts are refused, naming both counts and the tokens from where they differ.
PromptPair prompt_pair(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                       const std::string& clean, const std::string& corrupted);
/// The clean prompt twice, the second with `noise` on the embeddings of the tokens that spell its subject (drawn on
/// the host from `seed`: the same numbers on every device).
PromptPair noised_pair(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                       const std::string& clean, const NoiseCorruption& noise);

/// What to patch and how.
struct PatchRequest {
  std::vector<Site> sites = {Site::kResidPost};  // resid_post, attn_out, mlp_out
  std::vector<int64_t> layers;                   // the grid's rows; empty: every layer
  std::vector<int64_t> positions;                // the grid's columns; empty: every position
  int64_t layer_window = 1;  // a cell at layer L patches layers L - W/2 ... L - W/2 + W - 1 (ROME's window)
  Direction direction = Direction::kDenoise;
  bool exact = true;         // the grid, one patched run per cell
  bool attribution = false;  // attribution patching's estimates
  MetricSpec metric;
  int64_t rows_per_batch = 0;  // cells per pass; 0: chosen from the prompt's length and the device
};

/// One site's grids, [layers, positions] fp64 on the host.
struct SiteGrids {
  Site site;
  at::Tensor grid;         // the metric with each cell patched (request.exact)
  at::Tensor attribution;  // each cell's first-order estimate of grid - base metric (request.attribution)
};

struct PatchingResult {
  Metric metric;
  double clean_metric = 0, corrupted_metric = 0;
  std::vector<int64_t> layers, positions;
  std::vector<SiteGrids> sites;
  double seconds = 0;  // the grids' computation, the model loaded

  bool same_runs = false;  // the two runs' tokens (and noise) are the same

  /// Whether the clean and corrupted metrics agree: the runs are the same, or the metrics are equal to fp32's rounding
  /// (relative 1e-5; logit differences also within 1e-5 of each other near 0). `restored` has nothing to divide by
  /// then and is null. Attribution's two runs are rows of one batch, which the CPU need not round alike.
  bool metrics_agree() const;
};

/// The sites a patch can replace, and their names as messages list them ("resid_post, attn_out or mlp_out").
const std::vector<Site>& patch_sites();
std::string patch_site_names();

/// Refuses what `request` asks for that no model is needed to judge (sites that cannot be patched or are named twice,
/// a window below 1 or with attribution, attribution of KL when noising, no method), as a usage error.
void check_request_flags(const PatchRequest& request);
/// Refuses a noise scale that is not a finite number above 0, as a usage error.
void check_noise(const NoiseCorruption& noise);

/// Runs the clean and corrupted prompts, resolves the metric on them and computes the grids `request` asks for,
/// with a progress bar over the cells. With `graphs` (made for `model`), attribution's passes and backward are
/// captured as a CUDA graph where the model allows and the pair has at most 128 tokens, replayed for the next pair of
/// the same token count and request (a sweep over a templated dataset): the same numbers, without the host's
/// launches. The graph holds its pass's memory until `graphs` goes or captures another shape.
PatchingResult run_patching(const model::TransformerModel& model, const tokenizer::Tokenizer& tokenizer,
                            const PromptPair& pair, const PatchRequest& request, readout::StepGraphs* graphs = nullptr);

/// The layers a cell at `layer` patches with a window of `window` layers, within [0, layers).
std::vector<int64_t> window_layers(int64_t layer, int64_t window, int64_t layers);

}  // namespace probekit::patching
