#include "data/reference_labels.h"

#include <algorithm>

namespace probekit::data {

const std::vector<std::string>& reference_label_names() {
  static const std::vector<std::string> names = {
      "abstracting", "accepting", "analogical_thinking", "analyzing", "applying", "attentional_deployment",
      "cognition_awareness", "concretizing", "connecting", "convergent_thinking", "counterfactual_reasoning",
      "creating", "distinguishing", "divergent_thinking", "emotion_characterizing", "emotion_facilitation",
      "emotion_management", "emotion_organizing", "emotion_perception", "emotion_receiving", "emotion_responding",
      "emotion_understanding", "emotion_valuing", "emotional_reappraisal", "evaluating", "hypothesis_generation",
      "meta_awareness", "metacognitive_monitoring", "metacognitive_regulation", "noticing", "pattern_recognition",
      "perspective_taking", "questioning", "reconsidering", "reframing", "remembering", "response_modulation",
      "self_questioning", "situation_modification", "situation_selection", "suspending_judgment", "understanding",
      "updating_beliefs", "zooming_in", "zooming_out"};
  return names;
}

bool uses_reference_label_names(const std::string& label_field, const std::set<std::string>& labels) {
  const std::vector<std::string>& names = reference_label_names();
  return label_field == "cognitive_action" && std::all_of(labels.begin(), labels.end(), [&](const std::string& label) {
           return std::binary_search(names.begin(), names.end(), label);
         });
}

}  // namespace probekit::data
