// What a patching run writes: patching.json (every number, and what was patched) and patching.html (a heatmap per
// site and method, tokens along x and layers along y, self-contained).
#pragma once

#include <optional>
#include <string>

#include "common/json.h"
#include "patching/patching.h"

namespace probekit::patching {

/// What a run was made with beyond the request: the model and the prompts as given.
struct PatchingInputs {
  std::string model, device, dtype;
  std::string clean, corrupted;          // corrupted: empty with noise
  std::optional<NoiseCorruption> noise;  // ROME's corruption instead of a corrupted prompt
};

/// patching.json: grid / attribution / restored as [layer][position] lists (with several sites, one per site by
/// name), the clean and corrupted metrics, the answer and foil, the tokens and what was patched.
Json patching_json(const PatchingResult& result, const PromptPair& pair, const PatchRequest& request,
                   const PatchingInputs& inputs, const tokenizer::Tokenizer& tokenizer);

/// patching.html of a patching.json.
std::string patching_html(const Json& patching);

/// Writes patching.json and patching.html into the folder `dir`.
void write_patching(const std::string& dir, const Json& patching);

}  // namespace probekit::patching
