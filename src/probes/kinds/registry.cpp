// The probe kinds, one row each: a new kind is a file in this folder and a line here.
#include <fmt/ranges.h>

#include <memory>

#include "common/error.h"
#include "probes/kinds/kinds.h"

namespace probekit::probes {

namespace {

const std::vector<std::unique_ptr<ProbeKind>>& registry() {
  static const auto kinds = [] {
    std::vector<std::unique_ptr<ProbeKind>> all;
    all.push_back(make_linear_kind());
    all.push_back(make_multihead_kind());
    all.push_back(make_logistic_kind());
    all.push_back(make_mean_diff_kind());
    all.push_back(make_attention_kind());
    all.push_back(make_ema_kind());
    all.push_back(make_rolling_kind());
    all.push_back(make_multimax_kind());
    all.push_back(make_sparse_logistic_kind());
    return all;
  }();
  return kinds;
}

}  // namespace

const ProbeKind& probe_kind(const std::string& name) {
  for (const auto& kind : registry()) {
    if (name == kind->name()) return *kind;
  }
  fail_usage("unknown probe model type '{}' (expected one of {})", name, fmt::join(probe_kind_names(), ", "));
}

std::vector<std::string> probe_kind_names(bool multiclass) {
  std::vector<std::string> names;
  ProbeShape classes;
  classes.outputs = 2;
  for (const auto& kind : registry()) {
    // Every-token kinds and those whose shape has no multiclass form train one-vs-rest only.
    if (multiclass && (kind->reads_every_token() || !kind->shape_problem(classes).empty())) continue;
    names.emplace_back(kind->name());
  }
  return names;
}

}  // namespace probekit::probes
