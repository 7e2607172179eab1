// Reading a probes directory back (probes.json and its probe files, each checked against the index) and scoring
// with it: the ProbeSet of probe_files.h.
#include "probes/probe_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "data/dataset.h"
#include "device/torch/row_stable.h"
#include "io/safetensors.h"

namespace probekit::probes {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The probe shape an index describes, checked before anything is allocated by it.
ProbeShape index_shape(const Json& index, bool multiclass, const std::string& where) {
  ProbeShape shape;
  shape.kind = &probe_kind(json_at<std::string>(index, "model_type", where));
  shape.input_dim = json_at<int64_t>(index, "input_dim", where);
  shape.kind->read_shape(index, where, shape);
  shape.outputs = multiclass ? json_at<int64_t>(index, "num_classes", where) : 1;
  if (shape.input_dim <= 0 || !shape.kind->shape_problem(shape).empty()) {
    fail("input_dim {}, hidden_dim {} and num_heads {} do not describe a {} probe", shape.input_dim, shape.hidden_dim,
         shape.heads, shape.kind->name());
  }
  if (shape.outputs < 2 && multiclass) fail("num_classes {} does not describe a multiclass probe", shape.outputs);
  return shape;
}

std::string file_inside(const std::string& file) {
  if (file.empty() || file == ".." || file.find('/') != std::string::npos) {
    fail("probe file '{}' must name a file inside the directory", file);
  }
  return file;
}


std::vector<ProbeInfo> binary_probes(const Json& index, const std::string& index_path) {
  if (!index.contains("probes") || !index.at("probes").is_array()) fail("'probes' must be a list");
  std::vector<ProbeInfo> probes;
  for (size_t i = 0; i < index.at("probes").size(); ++i) {
    const Json& entry = index.at("probes")[i];
    std::string where = fmt::format("{}: probes[{}]", index_path, i);
    ProbeInfo info;
    info.label = json_at<std::string>(entry, "label", where);
    info.label_index = json_at<int64_t>(entry, "label_index", where);
    info.file = file_inside(json_at<std::string>(entry, "file", where));
    info.threshold = json_at<double>(entry, "threshold", where);
    info.threshold_logit = json_at<double>(entry, "threshold_logit", where);
    info.val_auc = json_at<double>(entry, "val_auc", where);
    info.best_epoch = json_at<int64_t>(entry, "best_epoch", where);
    if (entry.contains("calibration")) {
      const Json& calibration = entry.at("calibration");
      info.calibrated_threshold = json_at<double>(calibration, "threshold", where + ": calibration");
      if (calibration.contains("per_token")) {
        info.per_token_threshold = json_at<double>(calibration.at("per_token"), "threshold", where + ": calibration.per_token");
      }
    }
    probes.push_back(std::move(info));
  }
  return probes;
}

// One output per class of a multiclass probe; it has no threshold or AUROC of its own.
std::vector<ProbeInfo> class_outputs(const Json& index, const ProbeShape& shape) {
  auto names = index.at("labels").get<std::vector<std::string>>();
  if (static_cast<int64_t>(names.size()) != shape.outputs) {
    fail("lists {} labels for a probe of {} classes", names.size(), shape.outputs);
  }
  std::vector<ProbeInfo> classes;
  for (size_t c = 0; c < names.size(); ++c) {
    classes.push_back(ProbeInfo{names[c], static_cast<int64_t>(c), file_inside(index.at("file").get<std::string>()),
                                kNaN, kNaN, kNaN, index.value("best_epoch", int64_t{0})});
  }
  return classes;
}

// Checks a probe file against the index that lists it: its tensors, and the class (and class names) it records.
void check_listed_file(const safetensors::File& file, const ProbeShape& shape, bool multiclass,
                       const std::vector<ProbeInfo>& probes, const std::string& index_path) {
  check_probe_file(file, shape);
  const auto& metadata = file.metadata();
  auto model_class = metadata.find("model_class");
  if (model_class != metadata.end() && model_class->second != model_class_name(shape, !multiclass)) {
    fail("{}: holds a {}, but {} lists {} probes", file.path(), model_class->second, index_path,
         model_class_name(shape, !multiclass));
  }
  auto label_names = metadata.find("label_names");
  if (multiclass && label_names != metadata.end()) {
    std::vector<std::string> listed;
    for (const ProbeInfo& info : probes) listed.push_back(info.label);
    if (parse_json(label_names->second, file.path()) != Json(listed)) {
      fail("{}: its label_names differ from the labels {} lists", file.path(), index_path);
    }
  }
}

// Two probes of one label would leave one of them out of every ranking, unseen.
void check_distinct_labels(const std::vector<ProbeInfo>& probes, const std::string& index_path) {
  for (size_t i = 0; i < probes.size(); ++i) {
    for (size_t j = i + 1; j < probes.size(); ++j) {
      if (probes[i].label == probes[j].label) {
        fail("{}: lists label '{}' twice (entries {} and {}); every probe needs a label of its own", index_path,
             probes[i].label, i, j);
      }
    }
  }
}

}  // namespace

activations::ReadoutRecipe recorded_recipe(const Json& index, const std::string& where) {
  if (index.contains(kReadoutKey)) {
    return activations::ReadoutRecipe::from_json(index.at(kReadoutKey), fmt::format("{}: {}", where, kReadoutKey));
  }
  Json fields = index;
  fields.erase("dtype");  // the probes' own dtype there, not the pass's
  return activations::ReadoutRecipe::from_json(fields, where);
}

ProbeSet::ProbeSet(ProbeBank bank, std::vector<ProbeInfo> probes, Json index, activations::ReadoutRecipe recipe,
                   bool multiclass)
    : bank_(std::move(bank)),
      probes_(std::move(probes)),
      index_(std::move(index)),
      recipe_(std::move(recipe)),
      multiclass_(multiclass) {}

ProbeSet ProbeSet::load(const std::string& directory, at::Device device, at::ScalarType dtype) {
  std::string index_path = directory + "/" + kProbeIndexFile;
  if (!is_regular_file(index_path)) {
    fail_input("{}: no {} (is this a directory written by train_binary_probes or train_probes? with several layers, "
               "pick one layer_{{L}} folder)",
               directory, kProbeIndexFile);
  }
  Json index = read_json_file(index_path);
  std::vector<ProbeInfo> probes;
  ProbeShape shape;
  activations::ReadoutRecipe recipe;
  bool multiclass = false;
  try {
    const Json& format = index.at("format");
    multiclass = format == kMulticlassIndexFormat;
    if (!multiclass && format != kBinaryIndexFormat) fail("unknown format {}", format.dump());
    if (const int64_t layer = json_value<int64_t>(index, "layer", -1, index_path); layer < 0 && index.contains("layer")) {
      fail("layer {} is out of range (layers are numbered from 0)", layer);
    }
    recipe = recorded_recipe(index, index_path);
    shape = index_shape(index, multiclass, index_path);
    probes = multiclass ? class_outputs(index, shape) : binary_probes(index, index_path);
  } catch (const std::exception&) {
    rethrow_with_context(index_path);
  }
  if (probes.empty()) fail("{}: lists no probe", index_path);
  check_distinct_labels(probes, index_path);
  // Every file is checked against the index before the bank is allocated, so a damaged index cannot make the
  // bank larger than what the files hold.
  std::vector<safetensors::File> files;
  size_t file_count = multiclass ? 1 : probes.size();  // the classes of a multiclass probe share its file
  for (size_t k = 0; k < file_count; ++k) {
    check_listed_file(files.emplace_back(directory + "/" + probes[k].file), shape, multiclass, probes, index_path);
  }
  ProbeBank bank(shape, static_cast<int64_t>(files.size()), at::TensorOptions().device(device).dtype(dtype));
  for (size_t k = 0; k < files.size(); ++k) load_probe(files[k], bank, static_cast<int64_t>(k));
  return ProbeSet(std::move(bank), std::move(probes), std::move(index), std::move(recipe), multiclass);
}

int64_t ProbeSet::layer() const { return index_.value("layer", int64_t{-1}); }

at::Tensor ProbeSet::logits(const at::Tensor& activations) const {
  if (activations.dim() != 2 || activations.size(1) != bank_.shape().input_dim) {
    fail_input("probe input must be [N, {}], got [{}]", bank_.shape().input_dim, fmt::join(activations.sizes(), ", "));
  }
  if (bank_.shape().kind->reads_every_token()) {
    fail_input("{} probes read every token of a text: score them with token_logits", bank_.shape().kind->name());
  }
  at::Tensor input = activations.to(bank_.values().device(), bank_.values().scalar_type());
  // [N, probes, outputs]: K binary probes of one output, or one probe of C classes.
  return bank_.forward(input).reshape({activations.size(0), -1});
}

namespace {

// How the probes read texts' rows: their shape, with no leading special left out of masked rows.
ProbeShape reading_shape(const ProbeShape& shape, bool masked) {
  ProbeShape reading = shape;
  if (masked) reading.skip_leading = 0;
  return reading;
}

}  // namespace

TokenLayout ProbeSet::token_layout(const std::vector<int64_t>& offsets, bool masked) const {
  return probes::token_layout(offsets, reading_shape(bank_.shape(), masked));
}

at::Tensor ProbeSet::token_logits(const at::Tensor& rows, const std::vector<int64_t>& offsets, at::Tensor* weights,
                                  bool masked) const {
  const ProbeKind& kind = *bank_.shape().kind;
  if (!kind.reads_every_token()) fail_input("{} probes read one row per text, not every token", kind.name());
  if (rows.dim() != 2 || rows.size(1) != bank_.shape().input_dim || offsets.empty() || offsets.back() != rows.size(0)) {
    fail_input("probe input must be [rows, {}] with offsets ending at its rows, got [{}] and {} offsets",
               bank_.shape().input_dim, fmt::join(rows.sizes(), ", "), offsets.size());
  }
  at::Tensor input = rows.to(bank_.values().device(), bank_.values().scalar_type());
  TokenLayout layout = token_layout(offsets, masked);
  if (weights == nullptr) return probes::token_logits(bank_, input, layout).reshape({layout.texts(), -1});
  std::vector<int64_t> texts(static_cast<size_t>(layout.texts()));
  for (int64_t e = 0; e < layout.texts(); ++e) texts[e] = e;
  TrainActivations saved = kind.forward_tokens(bank_, token_batch(input, token_index(layout, texts.data(), layout.texts())));
  *weights = kind.token_weights(bank_, saved);
  return saved.logits.reshape({layout.texts(), -1});
}

at::Tensor ProbeSet::prefix_logits(const at::Tensor& rows, const std::vector<int64_t>& offsets,
                                   std::vector<int64_t>& counts, bool masked) const {
  const ProbeKind& kind = *bank_.shape().kind;
  if (!kind.reads_every_token()) fail_input("{} probes read one row per text, not its prefixes", kind.name());
  const TokenLayout prefixes = prefix_layout(offsets, reading_shape(bank_.shape(), masked), counts);
  const at::Tensor input = rows.to(bank_.values().device(), bank_.values().scalar_type());
  return kind.prefix_logits(bank_, input, prefixes).reshape({prefixes.texts(), -1});
}

at::Tensor ProbeSet::row_logits(const at::Tensor& rows) const {
  const ProbeKind& kind = *bank_.shape().kind;
  if (!kind.reads_every_token()) return {};
  at::Tensor scores = kind.row_logits(bank_, rows.to(bank_.values().device(), bank_.values().scalar_type()));
  return scores.defined() ? scores.reshape({rows.size(0), -1}) : scores;
}

std::vector<std::string> ProbeSet::labels() const {
  std::vector<std::string> out;
  for (const ProbeInfo& probe : probes_) out.push_back(probe.label);
  return out;
}

at::Tensor ProbeSet::direction(size_t index) const {
  const auto output = static_cast<int64_t>(index);
  return multiclass_ ? bank_.shape().kind->direction(bank_, 0, output) : bank_.shape().kind->direction(bank_, output, 0);
}

at::Tensor ProbeSet::probabilities(const at::Tensor& activations) const {
  at::Tensor logits = this->logits(activations).to(at::kFloat);
  return multiclass_ ? device::row_stable_softmax(logits) : device::row_stable_sigmoid(logits);
}

}  // namespace probekit::probes
