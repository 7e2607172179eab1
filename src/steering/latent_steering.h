// Steering by SAE latent (internal to steering/): latent operations resolved against the --sae dictionaries, and
// clamps placed as writes that depend on the values they change.
#pragma once

#include <vector>

#include "steering/steering.h"

namespace probekit::steering {

/// Appends what a kLatent operation does to `vectors`: an addition of the latent's decoder row at the SAE's site and
/// layer, or a clamp. The SAE is found by name among `saes` and the latent checked against its width (usage errors
/// naming the flag).
void resolve_latent(const SteeringOp& op, const std::vector<sae::SparseAutoencoder>& saes, SteeringVectors& vectors);

/// Places the clamps of `vectors` into `writes`, each SAE on its layer's device; `rows` (a [B] 0/1 float mask) limits
/// them to the rows of a batch that clamp, undefined: every row.
void place_clamps(const SteeringVectors& vectors, const model::TransformerModel& model, const at::Tensor& rows,
                  model::StreamWrites& writes);

}  // namespace probekit::steering
