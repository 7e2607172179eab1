#include "readout/site_reader.h"

#include "common/error.h"

namespace probekit::readout {

namespace {

// The decoder's hook name that completes a site's values, and the hook bits that ask for them.
const char* hook_name(Site site) {
  if (site == Site::kRouter) return "router_logits";
  if (site == Site::kExperts) return "expert_weights";  // the decoder gives "expert_ids" just before
  return site_name(site);
}

uint32_t hook_bits(Site site) {
  if (site == Site::kRouter) return model::kHookRouterLogits;
  if (site == Site::kExperts) return model::kHookExperts;
  return model::hook_site(site_name(site));
}

}  // namespace

SiteReader::SiteReader(const Request& request, at::Device device, std::function<at::Tensor(const at::Tensor&)> rows_of)
    : request_(request), device_(device), rows_of_(std::move(rows_of)), rows_(request.layers.size()) {
  if (request.layers.empty()) fail_input("no layers to read");
  for (size_t i = 0; i < request.layers.size(); ++i) slot_[request.layers[i]] = i;
  hook_ = [this](std::string_view name, int64_t layer, const at::Tensor& values) {
    auto slot = slot_.find(layer);
    if (slot == slot_.end()) return;
    if (request_.site == Site::kExperts && name == "expert_ids") expert_ids_ = values;
    if (name != hook_name(request_.site)) return;
    // An experts row holds the chosen ids, exact in fp32, then their weights.
    rows_[slot->second] = rows_of_(
        (request_.site == Site::kExperts ? at::cat({expert_ids_.to(at::kFloat), values}, -1) : values).to(device_));
  };
}

void SiteReader::attach(model::ForwardPass& pass) const {
  pass.last_layer = request_.layers.back();
  attach_hook(pass);
}

void SiteReader::attach_hook(model::ForwardPass& pass) const {
  pass.hook = &hook_;
  pass.hook_sites = hook_bits(request_.site);
}

}  // namespace probekit::readout
