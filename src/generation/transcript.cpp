#include "generation/transcript.h"

#include <fmt/format.h>

#include "loading/model_loading.h"
#include "tokenizer/tokenizer.h"

namespace probekit::generation {

Json generation_transcript(const std::string& model_dir, const std::vector<std::string>& prompts,
                           const GenerationOptions& options, const std::string& device, const std::string& dtype,
                           const steering::SteeringSpec& steering) {
  loading::ModelRequest request;
  request.model_dir = model_dir;
  request.device = device;
  request.dtype = dtype;
  model::LoadOptions load;
  load.lm_head = true;
  loading::LoadedModel loaded = loading::load_model(request, load);
  const model::TransformerModel& model = *loaded.model;
  const device::ComputeTarget& target = loaded.targets.front();
  tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(model_dir);
  std::vector<readout::Sequence> ids;
  for (const std::string& prompt : prompts) ids.push_back(tokenizer.encode(prompt, true));
  const steering::SteeringVectors vectors = steering::resolve(steering, model.config());
  const model::StreamWrites writes = steering::place(vectors, model);
  GenerationOptions with_top = options;
  with_top.top_logits = 5;
  with_top.writes = &writes;
  std::vector<Json> steps(prompts.size(), Json::array());
  std::vector<Generation> generations = generate(model, ids, with_top, nullptr, [&](const GeneratedToken& token) {
    steps[token.row].push_back({{"ids", token.top_ids}, {"logits", token.top_logits}});
    return true;
  });
  Json cases = Json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    cases.push_back({{"prompt", prompts[i]}, {"prompt_ids", ids[i]}, {"generated_ids", generations[i].ids},
                     {"stop", stop_reason_name(generations[i].stop)}, {"top5", steps[i]}});
  }
  std::string semantics = options.sampling.temperature == 0 ? "greedy" : "sampled";
  semantics += fmt::format(", {}, {}; top5 = the 5 largest next-token logits at each step (after any final logit "
                           "soft-capping)",
                           device::dtype_name(target.dtype_choice.dtype),
                           options.stop_ids.empty() ? "no eos stop" : "stops at eos");
  Json transcript = {{"model", model_dir}, {"semantics", semantics}, {"cases", cases}};
  if (!vectors.empty()) transcript["steering"] = vectors.record();
  return transcript;
}

}  // namespace probekit::generation
