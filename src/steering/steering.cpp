#include "steering/steering.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/units.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"
#include "sites/layers.h"
#include "steering/latent_steering.h"
#include "steering/vector_file.h"

namespace probekit::steering {

namespace {

// "LABEL@REST": the label and what follows the last '@'.
std::pair<std::string, std::string> split_at(const std::string& text, const char* flag, const char* form) {
  const size_t at = text.rfind('@');
  if (at == std::string::npos || at == 0 || at + 1 == text.size()) fail_usage("{} {}: expected {}", flag, text, form);
  return {text.substr(0, at), text.substr(at + 1)};
}

// A layer named by a flag or a request's field is a usage error (exit 2); one read from a vector file is the file's.
void check_layer(int64_t layer, const model::ModelConfig& config, const std::string& what, bool from_file) {
  if (layer >= 0 && layer < config.num_layers) return;
  const std::string message = fmt::format("{}: layer {} is out of range: the model ({}) has layers 0 to {}", what, layer,
                                          config.text_model_type, config.num_layers - 1);
  if (from_file) throw std::invalid_argument(message);
  throw UsageError(message);
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

  // `what` names the operation as it was given (the flag and its value), for messages.
  at::Tensor direction(const std::string& label, int64_t layer, const model::ModelConfig& config,
                       const std::string& what) {
    auto found = catalog_.layer_dirs.find(layer);
    if (found == catalog_.layer_dirs.end()) {
      std::vector<int64_t> layers;
      for (const auto& [l, dir] : catalog_.layer_dirs) layers.push_back(l);
      fail_usage("{}: {} has no probes for layer {} (it has layers {})", what, dir_, layer, fmt::join(layers, ","));
    }
    auto loaded = sets_.find(layer);
    if (loaded == sets_.end()) loaded = sets_.emplace(layer, probes::ProbeSet::load(found->second, at::kCPU, at::kFloat)).first;
    const probes::ProbeSet& set = loaded->second;
    for (size_t i = 0; i < set.probes().size(); ++i) {
      if (set.probes()[i].label != label) continue;
      at::Tensor direction;
      try {
        direction = set.direction(i);
      } catch (const std::invalid_argument& e) {  // a kind without one: named with the probes and the label
        fail_input("{}: {}, label '{}': {}", what, found->second, label, e.what());
      }
      checked_vector(std::vector<float>(direction.data_ptr<float>(), direction.data_ptr<float>() + direction.numel()),
                     config, fmt::format("{} ({})", what, found->second));
      return direction;
    }
    fail_usage("{}: {} has no probe for the label '{}' (its labels: {})", what, found->second, label,
               fmt::join(set.labels(), ", "));
  }

  Json source(const std::string& label) const { return {{"label", label}, {"probes", dir_}}; }

 private:
  std::string dir_;
  probes::ProbeCatalog catalog_;
  std::map<int64_t, probes::ProbeSet> sets_;
};

// How an operation is named in messages at one layer, as it was given.
std::string described(const SteeringOp& op, int64_t layer) {
  const bool add = op.action == SteeringAction::kAdd;
  switch (op.source) {
    case SteeringSource::kProbe:
      if (!op.from_flag) return fmt::format("{}@{}", op.label, layer);
      return fmt::format("{} {}@{}", add ? "--steer" : "--ablate", op.label, layer);
    case SteeringSource::kFile:
      return fmt::format("{} {} (layer {})", add ? "--steer-vector" : "--ablate-vector", op.path, layer);
    case SteeringSource::kVector: return fmt::format("{} vector at layer {}", add ? "steer" : "ablate", layer);
    case SteeringSource::kLatent:
      return fmt::format("{} {}:{} (layer {})", add ? "--steer-latent" : "--clamp-latent", op.sae, op.latent, layer);
  }
  return "";
}

// The layers an operation names: one layer as given (check_layer names one out of range, negative included, with
// the operation that gave it), or a list or range as --layers takes them ("all": every layer of the model).
std::vector<int64_t> op_layers(const SteeringOp& op, const model::ModelConfig& config) {
  const std::string& text = op.layers;
  const bool one = !text.empty() && text.find_first_not_of("-0123456789") == std::string::npos &&
                   text.find('-', 1) == std::string::npos && text != "-";
  if (one && text.size() < 10) return {std::stoll(text)};
  try {
    return parse_layers(text, config.num_layers);
  } catch (const UsageError& e) {
    // parse_layers speaks of --layers; the layers came with this operation's own flag or field.
    const std::string message = e.what();
    const size_t colon = message.find(": ");
    const std::string how = colon == std::string::npos ? message : message.substr(colon + 2);
    const std::string flag = op.source == SteeringSource::kProbe ? (op.action == SteeringAction::kAdd ? "--steer" : "--ablate")
                                                                 : "steering";
    fail_usage("{} {}@{}: {}", flag, op.label, text, how);
  }
}

// An operation's vectors by layer, each checked against the model, with what they came from.
struct LayerVector {
  int64_t layer;
  at::Tensor vector;
  Json source;
};

std::vector<LayerVector> op_vectors(const SteeringOp& op, const model::ModelConfig& config,
                                    std::optional<ProbeDirections>& probes) {
  std::vector<LayerVector> out;
  if (op.source == SteeringSource::kFile) {
    for (auto& [layer, values] : read_vector_file(op.path).layers) {
      check_layer(layer, config, described(op, layer), true);
      out.push_back({layer, checked_vector(values, config, described(op, layer)), {{"file", op.path}}});
    }
    return out;
  }
  for (int64_t layer : op_layers(op, config)) {
    check_layer(layer, config, described(op, layer), false);
    if (op.source == SteeringSource::kVector) {
      out.push_back({layer, checked_vector(op.vector, config, described(op, layer)), {{"vector", true}}});
    } else {
      out.push_back({layer, probes->direction(op.label, layer, config, described(op, layer)), probes->source(op.label)});
    }
  }
  return out;
}

// An added vector, and what it adds (coefficient x vector), within kMaxSteeringNorm: its norm is taken in fp64, since
// in fp32 a vector of finite values can have an infinite norm (which its record would hold).
void check_added_norm(const at::Tensor& vector, double coefficient, const std::string& what) {
  const double norm = vector.to(at::kDouble).norm().item<double>();
  if (norm > kMaxSteeringNorm) {
    fail_input("{}: the vector's norm is {:g}, past {:g}, where the residual stream cannot stay finite", what, norm,
               kMaxSteeringNorm);
  }
  if (std::abs(coefficient) * norm > kMaxSteeringNorm) {
    fail_input("{}: the vector's norm {:g} times the coefficient {:g} is past {:g}, where the residual stream cannot "
               "stay finite",
               what, norm, coefficient, kMaxSteeringNorm);
  }
}

// Each layer's ablated directions, in the order given.
std::map<int64_t, std::vector<at::Tensor>> ablated_by_layer(const SteeringVectors& vectors) {
  std::map<int64_t, std::vector<at::Tensor>> by_layer;
  for (const SteeringVectors::Ablation& a : vectors.ablations) by_layer[a.layer].push_back(a.unit);
  return by_layer;
}

// An orthonormal basis of the units' span (Gram-Schmidt, in fp64; a unit already in the span of those before it adds
// nothing): projecting these out one after another removes the whole span, where the units themselves, unless
// orthogonal, leave part of the earlier ones behind.
std::vector<at::Tensor> orthonormal(const std::vector<at::Tensor>& units) {
  std::vector<at::Tensor> basis;
  for (const at::Tensor& unit : units) {
    at::Tensor v = unit.to(at::kDouble);
    for (const at::Tensor& b : basis) v = v - (v * b).sum() * b;
    const double norm = v.norm().item<double>();
    if (norm > 1e-6) basis.push_back(v / norm);
  }
  for (at::Tensor& b : basis) b = b.to(at::kFloat);
  return basis;
}

}  // namespace

bool SteeringSpec::needs_probes() const {
  return std::any_of(ops.begin(), ops.end(), [](const SteeringOp& op) { return op.source == SteeringSource::kProbe; });
}

SteeringOp SteeringOp::probe(SteeringAction action, std::string label, std::string layers, double coefficient) {
  SteeringOp op;
  op.action = action;
  op.label = std::move(label);
  op.layers = std::move(layers);
  op.coefficient = coefficient;
  return op;
}

SteeringOp SteeringOp::file(SteeringAction action, std::string path, double coefficient) {
  SteeringOp op;
  op.action = action;
  op.source = SteeringSource::kFile;
  op.path = std::move(path);
  op.coefficient = coefficient;
  return op;
}

SteeringOp SteeringOp::given(SteeringAction action, std::vector<float> vector, int64_t layer, double coefficient) {
  SteeringOp op;
  op.action = action;
  op.source = SteeringSource::kVector;
  op.vector = std::move(vector);
  op.layers = std::to_string(layer);
  op.coefficient = coefficient;
  return op;
}

void check_coefficient(double coefficient, const std::string& where) {
  if (!std::isfinite(coefficient)) fail_usage("{}: the coefficient must be a finite number, got {}", where, coefficient);
  if (std::abs(coefficient) > kMaxSteeringCoefficient) {
    fail_usage("{}: the coefficient {} is past {:g}, where the residual stream cannot stay finite", where, coefficient,
               kMaxSteeringCoefficient);
  }
}

namespace {

// The coefficient after a flag value's last '=': a finite number within the bound, else a usage error naming it.
double coefficient_of(const std::string& text, const std::string& written, const char* flag, const char* form) {
  std::optional<double> coefficient = parse_number(written);
  if (!coefficient) {
    fail_usage("{} {}: the coefficient '{}' is not a number (expected {})", flag, text, written, form);
  }
  check_coefficient(*coefficient, fmt::format("{} {}", flag, text));
  return *coefficient;
}

}  // namespace

SteeringOp parse_probe_addition(const std::string& text) {
  constexpr const char* kForm = "LABEL@LAYER=COEF, e.g. reframing@17=4";
  const size_t equals = text.rfind('=');
  if (equals == std::string::npos) fail_usage("--steer {}: expected {}", text, kForm);
  auto [label, layer] = split_at(text.substr(0, equals), "--steer", kForm);
  std::optional<int> layer_number = parse_count(layer);
  if (!layer_number) fail_usage("--steer {}: the layer '{}' is not a layer number (expected {})", text, layer, kForm);
  const double coefficient = coefficient_of(text, text.substr(equals + 1), "--steer", kForm);
  SteeringOp op = SteeringOp::probe(SteeringAction::kAdd, label, std::to_string(*layer_number), coefficient);
  op.from_flag = true;
  return op;
}

// A file whose whole name holds '=' is that file when it exists; otherwise what follows the last '=' is the
// coefficient, and a bad one is a bad coefficient, not part of the file's name.
SteeringOp parse_file_addition(const std::string& text) {
  constexpr const char* kForm = "FILE[=COEF], e.g. reframing.safetensors=4";
  const size_t equals = text.rfind('=');
  if (equals == std::string::npos || path_exists(text)) return SteeringOp::file(SteeringAction::kAdd, text);
  if (equals == 0) fail_usage("--steer-vector {}: expected {}", text, kForm);
  return SteeringOp::file(SteeringAction::kAdd, text.substr(0, equals),
                          coefficient_of(text, text.substr(equals + 1), "--steer-vector", kForm));
}

SteeringOp parse_probe_ablation(const std::string& text) {
  auto [label, layers] = split_at(text, "--ablate", "LABEL@LAYERS, e.g. refusal@10-20");
  SteeringOp op = SteeringOp::probe(SteeringAction::kAblate, label, layers);
  op.from_flag = true;
  return op;
}

Json SteeringVectors::record() const {
  Json added = Json::array(), ablated = Json::array();
  for (const Addition& a : additions) {
    added.push_back({{"layer", a.layer}, {"coefficient", a.coefficient}, {"norm", a.vector.norm().item<double>()},
                     {"source", a.source}});
    if (a.site != Site::kResidPost) added.back()["site"] = site_name(a.site);
  }
  for (const Ablation& a : ablations) ablated.push_back({{"layer", a.layer}, {"source", a.source}});
  Json out = {{"site", site_name(Site::kResidPost)}, {"add", added}, {"ablate", ablated}};
  for (const Clamp& c : clamps) {
    const auto [site, layer] = written_at(*c.sae);
    out["clamp"].push_back({{"layer", layer}, {"site", site_name(site)}, {"value", c.value}, {"source", c.source}});
  }
  return out;
}

SteeringVectors resolve(const SteeringSpec& spec, const model::ModelConfig& config,
                        const std::vector<sae::SparseAutoencoder>& saes) {
  std::optional<ProbeDirections> probes;
  if (spec.needs_probes()) {
    if (spec.probes_dir.empty()) {
      fail_usage("--steer and --ablate name labels: give --probes-dir, the probes whose directions they take");
    }
    probes.emplace(spec.probes_dir);
  }
  SteeringVectors vectors;
  for (const SteeringOp& op : spec.ops) {
    if (op.source == SteeringSource::kLatent) {
      resolve_latent(op, saes, vectors);
      continue;
    }
    for (LayerVector& v : op_vectors(op, config, probes)) {
      if (op.action == SteeringAction::kAdd) {
        check_added_norm(v.vector, op.coefficient, described(op, v.layer));
        vectors.additions.push_back({v.layer, v.vector, op.coefficient, std::move(v.source)});
      } else {
        vectors.ablations.push_back({v.layer, unit(v.vector, described(op, v.layer)), std::move(v.source)});
      }
    }
  }
  return vectors;
}

model::StreamWrites place(const SteeringVectors& vectors, const model::TransformerModel& model) {
  std::map<std::pair<Site, int64_t>, at::Tensor> sums;
  for (const SteeringVectors::Addition& a : vectors.additions) {
    if (a.coefficient == 0) continue;
    at::Tensor scaled = a.vector * a.coefficient;
    at::Tensor& sum = sums[{a.site, a.layer}];
    sum = sum.defined() ? sum + scaled : scaled;
  }
  model::StreamWrites writes;
  for (const auto& [where, sum] : sums) writes.add(where.first, where.second, sum.to(device_of(model, where.second)));
  for (const auto& [layer, units] : ablated_by_layer(vectors)) {
    for (const at::Tensor& u : orthonormal(units)) writes.ablate(Site::kResidPost, layer, u.to(device_of(model, layer)));
  }
  place_clamps(vectors, model, at::Tensor(), writes);
  return writes;
}

model::StreamWrites place_rows(const std::vector<const SteeringVectors*>& rows, const model::TransformerModel& model) {
  const auto batch = static_cast<int64_t>(rows.size());
  const int64_t hidden = model.config().hidden_size;
  std::map<std::pair<Site, int64_t>, at::Tensor> sums;   // (site, layer) -> [B, hidden]
  std::map<int64_t, std::vector<at::Tensor>> ablations;  // layer -> the k-th direction of each row, [B, hidden]
  for (int64_t b = 0; b < batch; ++b) {
    if (rows[static_cast<size_t>(b)] == nullptr) continue;
    std::map<int64_t, size_t> ablated;  // this row's directions per layer so far
    for (const SteeringVectors::Addition& a : rows[static_cast<size_t>(b)]->additions) {
      if (a.coefficient == 0) continue;
      at::Tensor& sum = sums[{a.site, a.layer}];
      if (!sum.defined()) sum = at::zeros({batch, hidden}, at::kFloat);
      sum[b] += a.vector * a.coefficient;
    }
    for (const auto& [layer, directions] : ablated_by_layer(*rows[static_cast<size_t>(b)])) {
      std::vector<at::Tensor>& units = ablations[layer];
      for (const at::Tensor& u : orthonormal(directions)) {
        const size_t k = ablated[layer]++;
        if (units.size() <= k) units.push_back(at::zeros({batch, hidden}, at::kFloat));
        units[k][b].copy_(u);
      }
    }
  }
  model::StreamWrites writes;
  for (const auto& [where, sum] : sums) writes.add(where.first, where.second, sum.to(device_of(model, where.second)));
  for (const auto& [layer, units] : ablations) {
    for (const at::Tensor& u : units) writes.ablate(Site::kResidPost, layer, u.to(device_of(model, layer)));
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (rows[static_cast<size_t>(b)] == nullptr || rows[static_cast<size_t>(b)]->clamps.empty()) continue;
    at::Tensor only_this_row = at::zeros({batch}, at::kFloat);
    only_this_row[b] = 1.0f;
    place_clamps(*rows[static_cast<size_t>(b)], model, only_this_row, writes);
  }
  return writes;
}

}  // namespace probekit::steering
