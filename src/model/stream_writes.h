// Writes into the residual stream (steering), as data handed to the forward pass: at the output of decoder layer L
// (Site::kResidPost, the stream the probes of layer L read), at every position, directional ablations
// h - (h . u) u (Arditi et al. 2024) and then one addition (the sum of coefficient * v over the vectors of that
// layer), as repeng's and llama.cpp's control vectors apply them. The decoder applies them where it emits the site,
// so that a reader of the site sees the written stream; the pass never asks whether it steers.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "sites/sites.h"

namespace probekit::model {

/// What is written at one site of one layer. Each vector is fp32 on that layer's device, [hidden] for every row of
/// a pass or [B, hidden] for one per row of a padded batch.
struct StreamEdit {
  std::vector<at::Tensor> ablations;  // unit vectors
  at::Tensor addition;                // undefined: none

  /// `values` [B, T, hidden] (fp32) with the ablations and then the addition applied.
  at::Tensor apply(const at::Tensor& values) const;
};

/// Every edit of a pass, by site and layer; only writable sites (sites.h) take edits.
class StreamWrites {
 public:
  /// Adds `vector` (coefficient applied; [hidden] or [B, hidden], fp32, on the layer's device) to the site's values,
  /// summed with any vector added there before.
  void add(Site site, int64_t layer, const at::Tensor& vector);
  /// Adds a direction to project out ([hidden] or [B, hidden], unit length, fp32, on the layer's device).
  void ablate(Site site, int64_t layer, const at::Tensor& unit);

  const StreamEdit* find(Site site, int64_t layer) const;
  bool empty() const { return edits_.empty(); }
  /// The layers that carry an edit, ascending.
  std::vector<int64_t> layers() const;

 private:
  StreamEdit& edit(Site site, int64_t layer);
  std::map<std::pair<int64_t, Site>, StreamEdit> edits_;
};

}  // namespace probekit::model
