// The steering flags, declared once for every tool that runs a model (multi_probe_inference, inspect_model generate
// and hidden, capture_activations, steering_sweep's generations): --steer, --steer-vector, --ablate, --ablate-vector,
// and where SAEs are loaded --steer-latent and --clamp-latent.
#pragma once

#include "cli/app_fwd.h"
#include "steering/steering.h"

namespace probekit::steering {

/// Adds the steering flags bound to `spec`; with `probes_dir` also --probes-dir (for a tool that has none of its own);
/// with `latents` --steer-latent and --clamp-latent (for a tool that takes --sae).
void add_steering_flags(CLI::App& app, SteeringSpec& spec, bool probes_dir, bool latents = false);

}  // namespace probekit::steering
