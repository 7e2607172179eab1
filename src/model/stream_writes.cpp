#include "model/stream_writes.h"

#include "common/error.h"

namespace probekit::model {

namespace {

// A [hidden] vector as it is, a [B, hidden] one as [B, 1, hidden]: broadcast over the tokens of each row.
at::Tensor over_tokens(const at::Tensor& vector, const at::Tensor& values) {
  if (vector.dim() == 1) return vector;
  if (vector.size(0) != values.size(0)) {
    fail_input("a steering vector per row holds {} rows for a pass of {} rows", vector.size(0), values.size(0));
  }
  return vector.unsqueeze(1);
}

}  // namespace

at::Tensor StreamEdit::apply(const at::Tensor& values) const {
  at::Tensor out = values;
  for (const at::Tensor& unit : ablations) {
    at::Tensor u = over_tokens(unit, out);
    out = out - (out * u).sum(-1, true) * u;
  }
  if (addition.defined()) out = out + over_tokens(addition, out);
  return out;
}

StreamEdit& StreamWrites::edit(Site site, int64_t layer) {
  if (!site_row(site).writable()) fail_input("the site {} cannot be written (writable: {})", site_name(site), site_names(true));
  return edits_[{layer, site}];
}

void StreamWrites::add(Site site, int64_t layer, const at::Tensor& vector) {
  StreamEdit& e = edit(site, layer);
  e.addition = e.addition.defined() ? e.addition + vector : vector;
}

void StreamWrites::ablate(Site site, int64_t layer, const at::Tensor& unit) { edit(site, layer).ablations.push_back(unit); }

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
