#include "readout/site_reader.h"

#include "common/error.h"

namespace probekit::readout {

SiteReader::SiteReader(const Request& request, at::Device device, std::function<at::Tensor(const at::Tensor&)> rows_of)
    : request_(request), device_(device), rows_of_(std::move(rows_of)), rows_(request.layers.size()) {
  if (request.layers.empty()) fail_input("no layers to read");
  for (size_t i = 0; i < request.layers.size(); ++i) slot_[request.layers[i]] = i;
  hook_ = [this](Site site, int64_t layer, const at::Tensor& values) {
    auto slot = slot_.find(layer);
    if (slot == slot_.end() || site != request_.site) return;
    rows_[slot->second] = rows_of_(values.to(device_));
  };
}

void SiteReader::attach(model::ForwardPass& pass) const {
  pass.last_layer = request_.layers.back();
  pass.writes = request_.writes;
  attach_hook(pass);
}

void SiteReader::attach_hook(model::ForwardPass& pass) const {
  pass.hook = &hook_;
  pass.hook_sites = site_bit(request_.site);
}

}  // namespace probekit::readout
