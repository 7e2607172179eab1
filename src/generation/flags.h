// The generation flags, declared once for every tool that generates (inspect_model generate,
// multi_probe_inference --generate).
#pragma once

#include <string>

#include "cli/app_fwd.h"
#include "generation/generator.h"

namespace probekit::generation {

/// What the generation flags ask for.
struct GenerationFlags {
  GenerationOptions options;
  bool no_stop = false;  // --no-stop: the eos ids are suppressed rather than stopping a row
  bool from_command_line = false;  // set by add_generation_flags: its flags are warned about when they change nothing
};

/// Declares --max-new-tokens, --temperature, --sample-top-k, --top-p, --seed and --no-stop on `app`.
void add_generation_flags(CLI::App& app, GenerationFlags& flags);

/// The options for the model in `model_dir`: its eos ids as stop ids, or suppressed ids with --no-stop; checks the
/// sampling flags.
GenerationOptions resolve_generation_flags(const GenerationFlags& flags, const std::string& model_dir);

}  // namespace probekit::generation
