#include "probes/file_scores.h"

#include "common/error.h"
#include "probes/token_streams.h"
#include "probes/training_data.h"

namespace probekit::probes {

at::Tensor file_logits(const ProbeSet& set, const activations::ActivationFile& file) {
  std::vector<at::Tensor> parts;
  const char* kind = set.shape().kind->name();
  for (const activations::SplitData& split : file.splits) {
    if (split.examples() == 0) continue;
    at::Tensor rows = at::from_blob(const_cast<float*>(split.activations.data()), {split.rows, split.hidden}, at::kFloat);
    if (set.shape().kind->reads_every_token()) {
      if (split.offsets.empty()) fail_input("{}: one row per example, but {} probes read every token", file.path, kind);
      parts.push_back(set.token_logits(rows, split.offsets));
    } else {
      if (!split.offsets.empty()) fail_input("{}: per-token rows, but {} probes read one row per example", file.path, kind);
      parts.push_back(set.logits(rows));
    }
  }
  if (parts.empty()) fail_input("{}: no examples", file.path);
  return at::cat(parts).to(at::kDouble).contiguous();
}

void check_read_alike(const ProbeSet& set, const std::string& dir, const activations::ReadoutRecipe& recipe,
                      const std::string& path, const std::string& use) {
  const std::string difference = activations::recipe_difference(set.recipe(), recipe, "the probes' activations", path);
  if (!difference.empty()) {
    fail_input("{}: {} was read otherwise than the probes' activations ({}); capture it with the probes' recipe", dir,
               use, difference);
  }
}

LayerFileScores score_layer_file(const std::string& dir, const std::string& path, const std::string& use,
                                 const std::string& why_binary, bool token_maxima) {
  ProbeSet set = ProbeSet::load(dir, at::kCPU, at::kFloat);
  if (set.multiclass()) fail_input("{}: {}", dir, why_binary);
  activations::ActivationFile file = activations::read_activation_file(path);
  const ProbeKind& kind = *set.shape().kind;
  const bool last_of_tokens = !kind.reads_every_token() && set.recipe().position == Position::kLast &&
                              file.attributes.recipe.position == Position::kAll;
  activations::ReadoutRecipe as_read = file.attributes.recipe;
  if (last_of_tokens) as_read.position = Position::kLast;
  check_read_alike(set, dir, as_read, file.path, use);
  LayerFileScores scored{std::move(set), {}, {}, {}, {}};
  if (token_maxima) {
    scored.no_token_maxima = token_stream_problem(scored.set, file);
    if (scored.no_token_maxima.empty()) scored.token_maxima = token_stream_maxima(scored.set, file);
  }
  if (last_of_tokens) file = pooled_rows(std::move(file), Position::kLast);
  scored.logits = file_logits(scored.set, file);
  scored.file = std::move(file);
  return scored;
}

std::string layer_file_of(const std::string& capture, int64_t layer, const std::string& flag) {
  for (const std::string& path : activations::find_activation_files({capture})) {
    if (activations::read_attributes(path).layer == layer) return path;
  }
  fail_input("{} {}: no layer {} file for that layer's probes", flag, capture, layer);
}

std::vector<int64_t> file_labels(const activations::ActivationFile& file) {
  std::vector<int64_t> labels;
  for (const activations::SplitData& split : file.splits) labels.insert(labels.end(), split.labels.begin(), split.labels.end());
  return labels;
}

}  // namespace probekit::probes
