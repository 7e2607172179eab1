#include "monitor/stream_monitors.h"

#include <algorithm>
#include <cmath>

namespace probekit::monitor {

Json Firing::to_json() const {
  Json out = {{"label", label}, {"layer", layer}, {"score", score}, {"threshold", threshold}, {"index", index},
              {"action", action}};
  if (scope == Scope::kPrompt) out["scope"] = scope_name(scope);
  return out;
}

Json firings_json(const std::vector<Firing>& firings) {
  Json out = Json::array();
  for (const Firing& firing : firings) out.push_back(firing.to_json());
  return out;
}

StreamMonitors::StreamMonitors(std::shared_ptr<const MonitorSet> set) : set_(std::move(set)), fired_(set_->size(), false) {
  for (const ResolvedMonitor& m : *set_) aggregates_.push_back(m.aggregate->make(m.policy));
}

bool StreamMonitors::watches(Scope scope) const {
  return std::any_of(set_->begin(), set_->end(), [&](const ResolvedMonitor& m) { return m.policy.scope == scope; });
}

bool StreamMonitors::steering_pending() const {
  for (size_t i = 0; i < set_->size(); ++i) {
    const ResolvedMonitor& m = (*set_)[i];
    if (!fired_[i] && m.steering && m.policy.scope == Scope::kCompletion) return true;
  }
  return false;
}

std::vector<Firing> StreamMonitors::observe(const std::vector<std::vector<double>>& token_probability,
                                            const std::vector<std::vector<double>>& text_probability, int64_t index,
                                            Scope scope) {
  std::vector<Firing> firings;
  for (size_t i = 0; i < set_->size(); ++i) {
    const ResolvedMonitor& m = (*set_)[i];
    if (fired_[i] || m.policy.scope != scope) continue;
    const auto& probability = m.aggregate->reads_text_score ? text_probability : token_probability;
    const double token_score = probability[m.layer_index][m.column];
    if (std::isnan(token_score)) continue;  // a token the probe does not read (a leading special token)
    const double score = aggregates_[i]->add(token_score);
    if (!(score >= m.threshold)) continue;  // as ranking and calibration count
    fired_[i] = true;
    firings.push_back(Firing{i, m.policy.label, m.layer, score, m.threshold, index, scope, m.policy.action});
  }
  return firings;
}

}  // namespace probekit::monitor
