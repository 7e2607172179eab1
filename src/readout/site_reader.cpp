#include "readout/site_reader.h"

#include "common/error.h"

namespace probekit::readout {

namespace {

// An SAE site's rows: pooled positions pool each token's latents (and input and reconstruction); the others select
// the tokens first and encode only those.
std::function<at::Tensor(const at::Tensor&)> through_sae(const Request& request,
                                                         std::function<at::Tensor(const at::Tensor&)> rows_of) {
  const sae::LatentReading* latents = request.latents;
  if (request.position == Position::kMean || request.position == Position::kMax) {
    return [latents, rows_of](const at::Tensor& values) { return latents->finish(rows_of(latents->per_token(values))); };
  }
  return [latents, rows_of](const at::Tensor& values) { return latents->finish(latents->per_token(rows_of(values))); };
}

}  // namespace

SiteReader::SiteReader(const Request& request, at::Device device, std::function<at::Tensor(const at::Tensor&)> rows_of)
    : request_(request), device_(device),
      rows_of_(request.latents != nullptr ? through_sae(request, std::move(rows_of)) : std::move(rows_of)),
      rows_(request.layers.size()) {
  if (request.layers.empty()) fail_input("no layers to read");
  if (request.latents != nullptr) {
    const sae::SparseAutoencoder& sae = *request.latents->sae;
    if (request.site != sae.site || request.layers != std::vector<int64_t>{sae.layer}) {
      fail_input("SAE '{}' reads {} of layer {}, not what the request reads", sae.name, site_name(sae.site), sae.layer);
    }
  }
  // A transcoder's error needs its output site too, which its layer emits after the input site.
  if (request.latents != nullptr && request.latents->reads_output()) paired_output_ = request.latents->sae->output_site;
  for (size_t i = 0; i < request.layers.size(); ++i) slot_[request.layers[i]] = i;
  hook_ = [this](Site site, int64_t layer, const at::Tensor& values) {
    auto slot = slot_.find(layer);
    if (slot == slot_.end() || (site != request_.site && site != paired_output_)) return;
    if (!paired_output_) {
      rows_[slot->second] = rows_of_(values.to(device_));
    } else if (site == request_.site) {
      pending_input_ = values;
    } else {
      rows_[slot->second] = rows_of_(at::cat({pending_input_.to(device_, at::kFloat), values.to(device_, at::kFloat)}, -1));
      pending_input_ = at::Tensor();
    }
  };
}

void SiteReader::attach(model::ForwardPass& pass) const {
  pass.last_layer = request_.layers.back();
  pass.writes = request_.writes;
  attach_hook(pass);
}

void SiteReader::attach_hook(model::ForwardPass& pass) const {
  pass.hook = &hook_;
  pass.hook_sites = hook_sites();
}

uint32_t SiteReader::hook_sites() const {
  return site_bit(request_.site) | (paired_output_ ? site_bit(*paired_output_) : 0u);
}

}  // namespace probekit::readout
