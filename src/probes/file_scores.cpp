#include "probes/file_scores.h"

#include "common/error.h"

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

void check_read_alike(const ProbeSet& set, const std::string& dir, const activations::ActivationFile& file,
                      const std::string& use) {
  const std::string difference =
      activations::recipe_difference(set.recipe(), file.attributes.recipe, "the probes' activations", file.path);
  if (!difference.empty()) {
    fail_input("{}: {} was read otherwise than the probes' activations ({}); capture it with the probes' recipe", dir,
               use, difference);
  }
}

LayerFileScores score_layer_file(const std::string& dir, const std::string& path, const std::string& use,
                                 const std::string& why_binary) {
  ProbeSet set = ProbeSet::load(dir, at::kCPU, at::kFloat);
  if (set.multiclass()) fail_input("{}: {}", dir, why_binary);
  activations::ActivationFile file = activations::read_activation_file(path);
  check_read_alike(set, dir, file, use);
  at::Tensor logits = file_logits(set, file);
  return {std::move(set), std::move(file), std::move(logits)};
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
