#include "model/stream_writes.h"

#include "common/error.h"

namespace probekit::model {

namespace {

// A [hidden] vector as it is, a [B, hidden] one as [B, 1, hidden] (broadcast over the tokens of each row), a
// [B or 1, T, hidden] one as it is.
at::Tensor over_tokens(const at::Tensor& vector, const at::Tensor& values) {
  if (vector.dim() == 1) return vector;
  if (vector.dim() == 3) {
    if ((vector.size(0) != 1 && vector.size(0) != values.size(0)) || vector.size(1) != values.size(1)) {
      fail_input("a vector per token of [{}, {}] rows and tokens for a pass of [{}, {}]", vector.size(0), vector.size(1),
                 values.size(0), values.size(1));
    }
    return vector;
  }
  if (vector.size(0) != values.size(0)) {
    fail_input("a steering vector per row holds {} rows for a pass of {} rows", vector.size(0), values.size(0));
  }
  return vector.unsqueeze(1);
}

}  // namespace

at::Tensor StreamEdit::apply(const at::Tensor& values, const BranchInput& branch_input) const {
  at::Tensor out = values;
  for (const at::Tensor& unit : ablations) {
    at::Tensor u = over_tokens(unit, out);
    out = out - (out * u).sum(-1, true) * u;
  }
  if (!value_additions.empty()) {
    const at::Tensor before = out;
    for (const auto& change : value_additions) out = out + change(before, branch_input).to(out.scalar_type());
  }
  if (addition.defined()) out = out + over_tokens(addition, out);
  if (patched.defined()) {
    if (patched.size(0) != out.size(0) || patched.size(1) != out.size(1)) {
      fail_input("a patch of {} rows x {} tokens for a pass of {} rows x {} tokens", patched.size(0), patched.size(1),
                 out.size(0), out.size(1));
    }
    // A copy, not arithmetic: a patched value has the recorded run's bits.
    out = at::where(patched.unsqueeze(-1), patch_values.to(out.scalar_type()), out);
  }
  return out;
}

StreamEdit& StreamWrites::edit(Site site, int64_t layer) {
  if (!site_row(site).writable()) fail_input("the site {} cannot be written (writable: {})", site_name(site), site_names(true));
  // The embeddings occur once a pass, before the first layer: their writes go under layer -1 (TensorHook's too).
  if ((site == Site::kEmbeddings) != (layer == -1)) {
    fail_input("a write at layer {} of {}: the embeddings take layer -1, the other sites a decoder layer", layer,
               site_name(site));
  }
  return edits_[{layer, site}];
}

void StreamWrites::add(Site site, int64_t layer, const at::Tensor& vector) {
  StreamEdit& e = edit(site, layer);
  e.addition = e.addition.defined() ? e.addition + vector : vector;
}

void StreamWrites::ablate(Site site, int64_t layer, const at::Tensor& unit) { edit(site, layer).ablations.push_back(unit); }

void StreamWrites::add_by_value(Site site, int64_t layer, ValueAddition change, bool reads_before_norm) {
  StreamEdit& e = edit(site, layer);
  e.value_additions.push_back(std::move(change));
  e.reads_before_norm = e.reads_before_norm || reads_before_norm;
}

void StreamWrites::patch(Site site, int64_t layer, const at::Tensor& values, const at::Tensor& patched) {
  StreamEdit& e = edit(site, layer);
  if (e.patched.defined()) fail_input("layer {}'s {} is patched twice in one pass", layer, site_name(site));
  e.patch_values = values;
  e.patched = patched;
}

const StreamEdit* StreamWrites::find(Site site, int64_t layer) const {
  auto found = edits_.find({layer, site});
  return found == edits_.end() ? nullptr : &found->second;
}

std::vector<int64_t> StreamWrites::layers() const {
  std::vector<int64_t> layers;
  for (const auto& [key, edit] : edits_) {
    if (layers.empty() || layers.back() != key.first) layers.push_back(key.first);
  }
  return layers;
}

}  // namespace probekit::model
