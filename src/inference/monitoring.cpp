// Monitors on the engine's probes: policies resolved against the loaded probes, and generation with monitors run
// as a stream batch (inference/stream_batch.h), where each stream's monitors watch the scores of its tokens.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "inference/engine.h"
#include "inference/stream_batch.h"

namespace probekit::inference {

namespace {

using monitor::PolicyError;

// The layer index of a policy's probe: the one asked for, or the label's best by validation AUC.
size_t monitor_layer(const Engine& engine, const monitor::MonitorPolicy& policy, size_t column, const std::string& field) {
  const std::vector<int64_t>& layers = engine.layers();
  std::optional<size_t> best;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (std::isnan(engine.calibrated_threshold(l, column))) continue;
    if (policy.layer && layers[l] == *policy.layer) return l;
    // A NaN AUC (a label absent from validation) ranks below any other.
    if (!best || engine.validation_auc(l, column) > engine.validation_auc(*best, column) ||
        std::isnan(engine.validation_auc(*best, column))) {
      best = l;
    }
  }
  if (policy.layer) {
    throw PolicyError(fmt::format("'{}.layer': label '{}' has no probe at layer {} among those loaded ({})", field,
                                  policy.label, *policy.layer, fmt::join(layers, ", ")), field + ".layer");
  }
  if (!best) throw PolicyError(fmt::format("'{}.label': label '{}' has no probe loaded", field, policy.label), field + ".label");
  return *best;
}

// The steering a steer or ablate action applies, resolved against the model (null for the other actions).
std::shared_ptr<const steering::SteeringVectors> action_steering(const Engine& engine, const EngineOptions& options,
                                                                 const monitor::ResolvedMonitor& m,
                                                                 const std::string& field) {
  if (m.action->steering == monitor::ActionSteering::kNone) return nullptr;
  steering::SteeringSpec spec;
  spec.ops = m.policy.steering;
  spec.probes_dir = options.probes_dir;
  if (spec.ops.empty()) {
    spec.ops.push_back(steering::SteeringOp::probe(steering::SteeringAction::kAblate, m.policy.label, std::to_string(m.layer)));
  }
  try {
    return std::make_shared<const steering::SteeringVectors>(steering::resolve(spec, engine.model().config(), engine.saes()));
  } catch (const std::exception& e) {
    throw PolicyError(fmt::format("'{}.steer': {}", field, e.what()), field + ".steer");
  }
}

}  // namespace

void Engine::set_threshold(monitor::ResolvedMonitor& m) const {
  const size_t l = m.layer_index, k = m.column;
  const bool calibrated = m.policy.calibrated && calibrated_[l][k];
  if (m.policy.threshold) {
    m.threshold = *m.policy.threshold;
    m.threshold_source = "request";
  } else if (calibrated && !std::isnan(per_token_thresholds_[l][k])) {
    m.threshold = per_token_thresholds_[l][k];
    m.threshold_source = "calibration";
  } else if (calibrated) {
    // Calibrated on one row per text: a monitor comparing every token flags more texts than the calibration's share.
    m.threshold = thresholds_[l][k];
    m.threshold_source = "calibration of whole texts";
    spdlog::debug("monitor '{}' at layer {}: the probe's calibration holds no per-token threshold; its whole-text one "
                  "bounds the share of texts flagged at their last token only", m.policy.label, m.layer);
  } else {
    m.threshold = validation_thresholds_[l][k];
    m.threshold_source = "validation";
  }
}

std::shared_ptr<const monitor::MonitorSet> Engine::resolve_monitors(const std::vector<monitor::MonitorPolicy>& policies) const {
  auto set = std::make_shared<monitor::MonitorSet>();
  if (policies.empty()) return set;
  require_probes();
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string field = fmt::format("monitors[{}]", i);
    monitor::ResolvedMonitor m;
    m.policy = policies[i];
    auto label = std::find(labels_.begin(), labels_.end(), m.policy.label);
    if (label == labels_.end()) {
      throw PolicyError(fmt::format("'{}.label': no probes for label '{}' (the probes' labels: {})", field, m.policy.label,
                                    fmt::join(labels_, ", ")), field + ".label");
    }
    m.column = static_cast<size_t>(label - labels_.begin());
    m.layer_index = monitor_layer(*this, m.policy, m.column, field);
    m.layer = layers_[m.layer_index];
    set_threshold(m);
    m.aggregate = monitor::find_aggregate(m.policy.aggregate);
    m.action = monitor::find_action(m.policy.action);
    if (m.aggregate == nullptr || m.action == nullptr) {
      throw PolicyError(fmt::format("'{}': unknown aggregate or action", field), field);
    }
    m.steering = action_steering(*this, options_, m, field);
    set->push_back(std::move(m));
  }
  return set;
}

std::vector<GeneratedText> Engine::generate_monitored(const std::vector<std::string>& prompts,
                                                      const generation::GenerationOptions& options,
                                                      std::shared_ptr<const monitor::MonitorSet> monitors,
                                                      const ScoredTokenCallback& on_token, bool add_special_tokens,
                                                      const std::vector<std::vector<uint8_t>>& prompt_masks) const {
  if (!options_.generate) fail_input("generation needs the engine loaded for generation (EngineOptions::generate)");
  if (prompt_masks.empty()) require_texts();
  std::vector<GeneratedText> results(prompts.size());
  std::vector<std::exception_ptr> errors(prompts.size());
  StreamBatch batch(*this);
  // At most --batch-size streams at once, as generate runs --batch-size prompts at a time (each holds a cache); the
  // next prompt joins as a stream leaves.
  const auto most = static_cast<size_t>(std::max<int64_t>(1, options_.batch_size));
  size_t next = 0;
  auto request_of = [&](size_t row) {
    StreamRequest request;
    request.prompt_ids = tokenizer_->encode(prompts[row], add_special_tokens);
    if (!prompt_masks.empty()) request.prompt_mask = prompt_masks[row];
    warn_past_limit(request.prompt_ids, options.max_new_tokens);
    request.options = options.rows(row, row + 1);
    request.monitors = monitors;
    request.on_token = [row, &on_token](const ScoredToken& token) {
      ScoredToken numbered = token;
      numbered.row = row;
      return on_token(numbered);
    };
    request.on_end = [row, &results, &errors](const GeneratedText& done, std::exception_ptr error) {
      results[row] = done;
      errors[row] = error;
    };
    return request;
  };
  while (next < prompts.size() || !batch.empty()) {
    std::vector<StreamRequest> arriving;
    const size_t first = next;
    while (next < prompts.size() && batch.size() + arriving.size() < most) arriving.push_back(request_of(next++));
    if (!arriving.empty()) batch.join(std::move(arriving));
    // A prompt refused is the call's error at once, before the others generate.
    for (size_t row = first; row < next; ++row) {
      if (errors[row]) std::rethrow_exception(errors[row]);
    }
    if (!batch.empty()) batch.step();
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return results;
}

std::vector<GeneratedText> Engine::generate_watched(const ChatPrompts& prompts,
                                                    const generation::GenerationOptions& options,
                                                    std::shared_ptr<const monitor::MonitorSet> monitors,
                                                    const ScoredTokenCallback& on_token) const {
  if ((monitors == nullptr || monitors->empty()) && prompts.masks.empty()) {
    return generate(prompts.prompts, options, on_token, !prompts.rendered);
  }
  return generate_monitored(prompts.prompts, options, std::move(monitors), on_token, !prompts.rendered, prompts.masks);
}

}  // namespace probekit::inference
