// inspect_model generate: a checkpoint's generations written in the format of the reference fixtures'
// generation.json (transformers' generate), so that anyone can compare the two token for token.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "generation/generator.h"
#include "steering/steering.h"

namespace probekit::generation {

/// Loads the checkpoint in `model_dir` (every layer and the LM head) and its tokenizer on `device`/`dtype`
/// (the tools' --device/--dtype requests), generates after each prompt (tokenized with special tokens) and
/// returns {"model", "semantics", "cases": [{"prompt", "prompt_ids", "generated_ids", "stop",
/// "top5": [{"ids", "logits"}, ...]}]}; top5 holds each step's five largest logits. With a `steering` spec the
/// vectors are added (every pass, prompt and new tokens) and the output records them under "steering".
Json generation_transcript(const std::string& model_dir, const std::vector<std::string>& prompts,
                           const GenerationOptions& options, const std::string& device, const std::string& dtype,
                           const steering::SteeringSpec& steering = {});

}  // namespace probekit::generation
