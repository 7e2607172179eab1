// Steering by SAE latent (internal to steering/): latent operations resolved against the --sae dictionaries, and
// clamps placed as writes that depend on the values they change.
#pragma once

#include <utility>
#include <vector>

#include "steering/steering.h"

namespace probekit::steering {

/// Appends what a kLatent operation does to `vectors`: an addition of the latent's decoder row at the SAE's site and
/// layer, or a clamp. The SAE is found by name among `saes` and the latent checked against its width (usage errors
/// naming the flag).
void resolve_latent(const SteeringOp& op, const std::vector<sae::SparseAutoencoder>& saes, SteeringVectors& vectors);

/// Where a latent's change is written: the site the SAE reconstructs, at its layer. The residual stream entering layer
/// L is the one leaving layer L - 1 (the embeddings, layer -1, before layer 0), so an SAE on resid_pre writes there.
std::pair<Site, int64_t> written_at(const sae::SparseAutoencoder& sae);

/// The device of a write at `layer` (-1: the embeddings, on the first layer's; past the loaded layers: the model's).
at::Device device_of(const model::TransformerModel& model, int64_t layer);

/// Places the clamps of `vectors` into `writes`, each SAE on its layer's device; `rows` (a [B] 0/1 float mask) limits
/// them to the rows of a batch that clamp, undefined: every row.
void place_clamps(const SteeringVectors& vectors, const model::TransformerModel& model, const at::Tensor& rows,
                  model::StreamWrites& writes);

}  // namespace probekit::steering
