// Writes into the forward pass, as data handed to it: at a site of decoder layer L (Site::kResidPost, the stream
// the probes of layer L read, and the branches attn_out and mlp_out; the embeddings as layer -1), directional
// ablations h - (h . u) u (Arditi et al. 2024), then one addition (the sum of coefficient * v over the vectors of
// that layer), as repeng's and llama.cpp's control vectors apply them, then a patch: values recorded from another
// run put in place of this run's at chosen (row, position)s (activation patching). The decoder applies them where
// it emits the site, so that a reader of the site sees the written stream; the pass never asks whether it steers.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "sites/sites.h"

namespace probekit::model {

/// The input of the branch a site is the output of (mlp_out's), which a transcoder's clamp encodes: the MLP's input
/// (mlp_in) and what its norm reads (resid_mid, or resid_pre where the branches run in parallel), from which
/// ln2_normalized is made. Undefined for the other sites.
struct BranchInput {
  at::Tensor normed;
  at::Tensor before_norm;
};

/// What an addition that depends on the values adds: (values, the branch's input) -> the change.
using ValueAddition = std::function<at::Tensor(const at::Tensor& values, const BranchInput& branch_input)>;

/// What is written at one site of one layer. Each vector is fp32 on that layer's device, [hidden] for every row of
/// a pass or [B, hidden] for one per row of a padded batch; an addition may also be [B or 1, T, hidden], one per token.
struct StreamEdit {
  std::vector<at::Tensor> ablations;  // unit vectors
  // Additions that depend on the values they go into: each gives, for values [B, T, width] and the input of the
  // branch they are the output of (BranchInput), what to add (an SAE latent's clamp, (v - z_i(x)) W_dec[i], a
  // transcoder's z_i read from the branch's input). Applied after the ablations, each to the same values.
  std::vector<ValueAddition> value_additions;
  bool reads_before_norm = false;  // a value addition reads BranchInput::before_norm, which the decoder then keeps
  at::Tensor addition;                // undefined: none
  at::Tensor patch_values;  // [T, width] or [B, T, width]: what a patched position takes (cast to the values' dtype)
  at::Tensor patched;       // [B, T] bool: the positions patched; undefined: none

  /// `values` [B, T, width] with the ablations, the value additions, the addition and then the patch applied.
  at::Tensor apply(const at::Tensor& values, const BranchInput& branch_input = {}) const;
};

/// Every edit of a pass, by site and layer; only writable sites (sites.h) take edits.
class StreamWrites {
 public:
  /// Adds `vector` (coefficient applied; [hidden] or [B, hidden], fp32, on the layer's device) to the site's values,
  /// summed with any vector added there before.
  void add(Site site, int64_t layer, const at::Tensor& vector);
  /// Adds a direction to project out ([hidden] or [B, hidden], unit length, fp32, on the layer's device).
  void ablate(Site site, int64_t layer, const at::Tensor& unit);
  /// Adds what `change` gives for the site's values (after the ablations; see StreamEdit::value_additions);
  /// `reads_before_norm`: it reads the branch's input before its norm (BranchInput::before_norm).
  void add_by_value(Site site, int64_t layer, ValueAddition change, bool reads_before_norm = false);
  /// Puts `values` ([T, width] or [B, T, width], on the layer's device) in place of the site's values where
  /// `patched` ([B, T] bool) holds; one patch per site and layer.
  void patch(Site site, int64_t layer, const at::Tensor& values, const at::Tensor& patched);

  const StreamEdit* find(Site site, int64_t layer) const;
  bool empty() const { return edits_.empty(); }
  /// The layers that carry an edit, ascending.
  std::vector<int64_t> layers() const;

 private:
  StreamEdit& edit(Site site, int64_t layer);
  std::map<std::pair<int64_t, Site>, StreamEdit> edits_;
};

}  // namespace probekit::model
