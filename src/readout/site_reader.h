// The readout's hook on a forward pass (internal to readout/): it collects, for each requested layer, the rows
// made of the values at the request's site. read_rows, read_prefixes and the generation reader share it.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "model/transformer.h"
#include "readout/readout.h"

namespace probekit::readout {

/// Collects, for each requested layer, what `rows_of` makes of the values [B, T, width] at the request's site,
/// given on `device` (the model's first: the layers of a model split over devices give them on theirs).
/// The reader is its hook's target: it is neither copied nor moved.
class SiteReader {
 public:
  SiteReader(const Request& request, at::Device device, std::function<at::Tensor(const at::Tensor&)> rows_of);
  SiteReader(const SiteReader&) = delete;
  SiteReader& operator=(const SiteReader&) = delete;

  /// Points `pass` at this reader: stop after the deepest layer, give the hook the site only, steer as the request
  /// says.
  void attach(model::ForwardPass& pass) const;
  /// Gives `pass`'s hook the site only, leaving its layers and writes as they are (a pass that goes on to the LM
  /// head).
  void attach_hook(model::ForwardPass& pass) const;
  /// The hook attach_hook gives a pass, and the sites it wants (for a pass whose hook feeds several readers).
  const model::TensorHook& hook() const { return hook_; }
  uint32_t hook_sites() const;
  const std::vector<at::Tensor>& rows() const { return rows_; }
  /// [rows, layers, width].
  at::Tensor stacked() const { return at::stack(rows_, 1); }

 private:
  const Request& request_;
  at::Device device_;
  std::function<at::Tensor(const at::Tensor&)> rows_of_;
  std::optional<Site> paired_output_;  // a transcoder's output site, read with the request's site
  at::Tensor pending_input_;           // the request's site's values until the paired site comes
  std::map<int64_t, size_t> slot_;
  std::vector<at::Tensor> rows_;
  model::TensorHook hook_;
};

}  // namespace probekit::readout
