#include "steering/steering_flags.h"

#include <CLI/CLI.hpp>

namespace probekit::steering {

void add_steering_flags(CLI::App& app, SteeringSpec& spec, bool probes_dir, bool latents) {
  app.add_option_function<std::vector<std::string>>(
         "--steer",
         [&spec](const std::vector<std::string>& values) {
           for (const std::string& value : values) spec.ops.push_back(parse_probe_addition(value));
         },
         "LABEL@LAYER=COEF: add COEF times the label's probe direction (unit length) to the output of decoder layer "
         "LAYER at every position; repeatable")
      ->type_name("LABEL@LAYER=COEF");
  app.add_option_function<std::vector<std::string>>(
         "--steer-vector",
         [&spec](const std::vector<std::string>& values) {
           for (const std::string& value : values) spec.ops.push_back(parse_file_addition(value));
         },
         "FILE[=COEF]: add COEF (default 1) times each layer's vector of a .safetensors (layer.{L}) or GGUF control "
         "vector (direction.{L}) file; repeatable")
      ->type_name("FILE[=COEF]");
  app.add_option_function<std::vector<std::string>>(
         "--ablate",
         [&spec](const std::vector<std::string>& values) {
           for (const std::string& value : values) spec.ops.push_back(parse_probe_ablation(value));
         },
         "LABEL@LAYERS: project the label's probe direction out of those layers' outputs (h - (h.u)u); repeatable")
      ->type_name("LABEL@LAYERS");
  app.add_option_function<std::vector<std::string>>(
         "--ablate-vector",
         [&spec](const std::vector<std::string>& values) {
           for (const std::string& path : values) spec.ops.push_back(SteeringOp::file(SteeringAction::kAblate, path));
         },
         "FILE: project each layer's vector (normalized) of a vector file out of that layer's output")
      ->type_name("FILE");
  if (probes_dir) app.add_option("--probes-dir", spec.probes_dir, "Probes whose directions --steer and --ablate take");
  if (!latents) return;
  for (const SteeringAction action : {SteeringAction::kAdd, SteeringAction::kClamp}) {
    const bool add = action == SteeringAction::kAdd;
    app.add_option_function<std::vector<std::string>>(
           add ? "--steer-latent" : "--clamp-latent",
           [&spec, action](const std::vector<std::string>& values) {
             for (const std::string& value : values) spec.ops.push_back(parse_latent_op(value, action));
           },
           add ? "NAME:INDEX=COEF: add COEF times latent INDEX's decoder row (as stored) of the SAE NAME (--sae) at its "
                 "site and layer, at every position; repeatable"
               : "NAME:INDEX=VALUE: set latent INDEX of the SAE NAME (--sae) to VALUE at every position, adding the "
                 "reconstruction's change (VALUE - z) W_dec[INDEX]; repeatable")
        ->type_name(add ? "NAME:INDEX=COEF" : "NAME:INDEX=VALUE");
  }
}

}  // namespace probekit::steering
