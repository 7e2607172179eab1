#include "steering/steering.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/units.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"
#include "sites/layers.h"
#include "steering/vector_file.h"

namespace probekit::steering {

namespace {

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// "LABEL@REST": the label and what follows the last '@'.
std::pair<std::string, std::string> split_at(const std::string& text, const char* flag, const char* form) {
  const size_t at = text.rfind('@');
  if (at == std::string::npos || at == 0 || at + 1 == text.size()) fail_usage("{} {}: expected {}", flag, text, form);
  return {text.substr(0, at), text.substr(at + 1)};
}

void check_layer(int64_t layer, const model::ModelConfig& config, const std::string& what) {
  if (layer < 0 || layer >= config.num_layers) {
    fail_input("{}: layer {} is out of range: the model ({}) has layers 0 to {}", what, layer, config.text_model_type,
               config.num_layers - 1);
  }
}

at::Tensor checked_vector(std::vector<float> values, const model::ModelConfig& config, const std::string& what) {
  if (static_cast<int64_t>(values.size()) != config.hidden_size) {
    fail_input("{}: the vector has {} values, the model's hidden size is {}", what, values.size(), config.hidden_size);
  }
  at::Tensor vector = at::tensor(values, at::kFloat);
  if (!at::isfinite(vector).all().item<bool>()) fail_input("{}: the vector holds NaN or infinite values", what);
  return vector;
}

at::Tensor unit(const at::Tensor& vector, const std::string& what) {
  const double norm = vector.norm().item<double>();
  if (norm == 0) fail_input("{}: a zero vector has no direction to project out", what);
  return vector / norm;
}

// The probes of a directory by layer, each loaded once.
class ProbeDirections {
 public:
  explicit ProbeDirections(const std::string& dir) : dir_(dir), catalog_(probes::find_probes(dir)) {}

  at::Tensor direction(const std::string& label, int64_t layer, const model::ModelConfig& config) {
    auto found = catalog_.layer_dirs.find(layer);
    if (found == catalog_.layer_dirs.end()) {
      std::vector<int64_t> layers;
      for (const auto& [l, dir] : catalog_.layer_dirs) layers.push_back(l);
      fail_input("{}@{}: {} has no probes for layer {} (it has layers {})", label, layer, dir_, layer, fmt::join(layers, ","));
    }
    auto loaded = sets_.find(layer);
    if (loaded == sets_.end()) loaded = sets_.emplace(layer, probes::ProbeSet::load(found->second, at::kCPU, at::kFloat)).first;
    const probes::ProbeSet& set = loaded->second;
    for (size_t i = 0; i < set.probes().size(); ++i) {
      if (set.probes()[i].label != label) continue;
      at::Tensor direction = set.direction(i);
      checked_vector(std::vector<float>(direction.data_ptr<float>(), direction.data_ptr<float>() + direction.numel()),
                     config, fmt::format("{}@{} ({})", label, layer, found->second));
      return direction;
    }
    fail_input("{}@{}: {} has no probe for the label '{}'", label, layer, found->second, label);
  }

  Json source(const std::string& label) const { return {{"label", label}, {"probes", dir_}}; }

 private:
  std::string dir_;
  probes::ProbeCatalog catalog_;
  std::map<int64_t, probes::ProbeSet> sets_;
};

void add_probe_vectors(const SteeringSpec& spec, const model::ModelConfig& config, SteeringVectors& out) {
  if (!spec.needs_probes()) return;
  if (spec.probes_dir.empty()) {
    fail_usage("--steer and --ablate name labels: give --probes-dir, the probes whose directions they take");
  }
  ProbeDirections probes(spec.probes_dir);
  for (const SteeringSpec::ProbeAddition& a : spec.probe_additions) {
    check_layer(a.layer, config, fmt::format("--steer {}@{}", a.label, a.layer));
    out.additions.push_back({a.layer, probes.direction(a.label, a.layer, config), a.coefficient, probes.source(a.label)});
  }
  for (const SteeringSpec::ProbeAblation& a : spec.probe_ablations) {
    for (int64_t layer : parse_layers(a.layers, config.num_layers)) {
      out.ablations.push_back({layer, probes.direction(a.label, layer, config), probes.source(a.label)});
    }
  }
}

void add_given_vectors(const SteeringSpec& spec, const model::ModelConfig& config, SteeringVectors& out) {
  for (const SteeringSpec::FileAddition& a : spec.file_additions) {
    for (auto& [layer, values] : read_vector_file(a.path).layers) {
      const std::string what = fmt::format("--steer-vector {} (layer {})", a.path, layer);
      check_layer(layer, config, what);
      out.additions.push_back({layer, checked_vector(values, config, what), a.coefficient, {{"file", a.path}}});
    }
  }
  for (const std::string& path : spec.file_ablations) {
    for (auto& [layer, values] : read_vector_file(path).layers) {
      const std::string what = fmt::format("--ablate-vector {} (layer {})", path, layer);
      check_layer(layer, config, what);
      out.ablations.push_back({layer, unit(checked_vector(values, config, what), what), {{"file", path}}});
    }
  }
  for (const SteeringSpec::VectorAddition& a : spec.vector_additions) {
    const std::string what = fmt::format("steer vector at layer {}", a.layer);
    check_layer(a.layer, config, what);
    out.additions.push_back({a.layer, checked_vector(a.vector, config, what), a.coefficient, {{"vector", true}}});
  }
  for (const SteeringSpec::VectorAddition& a : spec.vector_ablations) {
    const std::string what = fmt::format("ablate vector at layer {}", a.layer);
    check_layer(a.layer, config, what);
    out.ablations.push_back({a.layer, unit(checked_vector(a.vector, config, what), what), {{"vector", true}}});
  }
}

at::Device device_of(const model::TransformerModel& model, int64_t layer) {
  return layer < model.loaded_layers() ? model.layer_device(layer) : model.device();
}

}  // namespace

bool SteeringSpec::empty() const {
  return probe_additions.empty() && file_additions.empty() && vector_additions.empty() && probe_ablations.empty() &&
         file_ablations.empty() && vector_ablations.empty();
}

bool SteeringSpec::needs_probes() const { return !probe_additions.empty() || !probe_ablations.empty(); }

SteeringSpec::ProbeAddition parse_probe_addition(const std::string& text) {
  constexpr const char* kForm = "LABEL@LAYER=COEF, e.g. reframing@17=4";
  const size_t equals = text.rfind('=');
  if (equals == std::string::npos) fail_usage("--steer {}: expected {}", text, kForm);
  auto [label, layer] = split_at(text.substr(0, equals), "--steer", kForm);
  std::optional<double> coefficient = parse_number(text.substr(equals + 1));
  std::optional<int> layer_number = parse_count(layer);
  if (!coefficient || !layer_number) fail_usage("--steer {}: expected {}", text, kForm);
  return {label, *layer_number, *coefficient};
}

SteeringSpec::FileAddition parse_file_addition(const std::string& text) {
  const size_t equals = text.rfind('=');
  std::optional<double> coefficient = equals == std::string::npos ? std::nullopt : parse_number(text.substr(equals + 1));
  if (!coefficient) return {text, 1.0};
  if (equals == 0) fail_usage("--steer-vector {}: expected FILE[=COEF]", text);
  return {text.substr(0, equals), *coefficient};
}

SteeringSpec::ProbeAblation parse_probe_ablation(const std::string& text) {
  auto [label, layers] = split_at(text, "--ablate", "LABEL@LAYERS, e.g. refusal@10-20");
  return {label, layers};
}

Json SteeringVectors::record() const {
  Json added = Json::array(), ablated = Json::array();
  for (const Addition& a : additions) {
    added.push_back({{"layer", a.layer}, {"coefficient", a.coefficient}, {"norm", a.vector.norm().item<double>()},
                     {"source", a.source}});
  }
  for (const Ablation& a : ablations) ablated.push_back({{"layer", a.layer}, {"source", a.source}});
  return {{"site", site_name(Site::kResidPost)}, {"add", added}, {"ablate", ablated}};
}

SteeringVectors resolve(const SteeringSpec& spec, const model::ModelConfig& config) {
  SteeringVectors vectors;
  add_probe_vectors(spec, config, vectors);
  add_given_vectors(spec, config, vectors);
  return vectors;
}

model::StreamWrites place(const SteeringVectors& vectors, const model::TransformerModel& model) {
  std::map<int64_t, at::Tensor> sums;
  for (const SteeringVectors::Addition& a : vectors.additions) {
    if (a.coefficient == 0) continue;
    at::Tensor scaled = a.vector * a.coefficient;
    sums[a.layer] = sums[a.layer].defined() ? sums[a.layer] + scaled : scaled;
  }
  model::StreamWrites writes;
  for (const auto& [layer, sum] : sums) writes.add(Site::kResidPost, layer, sum.to(device_of(model, layer)));
  for (const SteeringVectors::Ablation& a : vectors.ablations) {
    writes.ablate(Site::kResidPost, a.layer, a.unit.to(device_of(model, a.layer)));
  }
  return writes;
}

model::StreamWrites place_rows(const std::vector<const SteeringVectors*>& rows, const model::TransformerModel& model) {
  const auto batch = static_cast<int64_t>(rows.size());
  const int64_t hidden = model.config().hidden_size;
  std::map<int64_t, at::Tensor> sums;                    // layer -> [B, hidden]
  std::map<int64_t, std::vector<at::Tensor>> ablations;  // layer -> the k-th direction of each row, [B, hidden]
  for (int64_t b = 0; b < batch; ++b) {
    if (rows[static_cast<size_t>(b)] == nullptr) continue;
    std::map<int64_t, size_t> ablated;  // this row's directions per layer so far
    for (const SteeringVectors::Addition& a : rows[static_cast<size_t>(b)]->additions) {
      if (a.coefficient == 0) continue;
      at::Tensor& sum = sums[a.layer];
      if (!sum.defined()) sum = at::zeros({batch, hidden}, at::kFloat);
      sum[b] += a.vector * a.coefficient;
    }
    for (const SteeringVectors::Ablation& a : rows[static_cast<size_t>(b)]->ablations) {
      std::vector<at::Tensor>& units = ablations[a.layer];
      const size_t k = ablated[a.layer]++;
      if (units.size() <= k) units.push_back(at::zeros({batch, hidden}, at::kFloat));
      units[k][b].copy_(a.unit);
    }
  }
  model::StreamWrites writes;
  for (const auto& [layer, sum] : sums) writes.add(Site::kResidPost, layer, sum.to(device_of(model, layer)));
  for (const auto& [layer, units] : ablations) {
    for (const at::Tensor& u : units) writes.ablate(Site::kResidPost, layer, u.to(device_of(model, layer)));
  }
  return writes;
}

}  // namespace probekit::steering
