#include "probes/probe_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "data/dataset.h"
#include "io/safetensors.h"
#include "probes/binary_trainer.h"

namespace probekit::probes {

namespace {

constexpr const char* kIndexFile = "probes.json";
constexpr const char* kIndexFormat = "probekit.binary_probes";
constexpr const char* kMulticlassIndexFormat = "probekit.multiclass_probe";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

safetensors::DType file_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return safetensors::DType::kF32;
    case at::kBFloat16: return safetensors::DType::kBF16;
    case at::kHalf: return safetensors::DType::kF16;
    case at::kDouble: return safetensors::DType::kF64;
    default: fail_input("probe files hold float tensors, not {}", c10::toString(type));
  }
}

at::ScalarType tensor_dtype(safetensors::DType type, const std::string& name, const std::string& path) {
  switch (type) {
    case safetensors::DType::kF32: return at::kFloat;
    case safetensors::DType::kBF16: return at::kBFloat16;
    case safetensors::DType::kF16: return at::kHalf;
    case safetensors::DType::kF64: return at::kDouble;
    default: fail("{}: tensor '{}' has dtype {}, expected a float type", path, name, safetensors::dtype_name(type));
  }
}

std::string number(double value) { return fmt::format("{}", value); }

std::vector<std::string> parameter_names(const std::vector<ParameterSpec>& specs) {
  std::vector<std::string> names;
  for (const ParameterSpec& spec : specs) names.push_back(spec.name);
  return names;
}

void write_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& named,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;  // owns the CPU copies while they are written
  std::vector<safetensors::TensorData> tensors;
  for (const auto& [name, tensor] : named) {
    keep.push_back(tensor.to(at::kCPU).contiguous());
    const at::Tensor& host = keep.back();
    safetensors::TensorData data;
    data.name = name;
    data.dtype = file_dtype(host.scalar_type());
    data.shape = host.sizes().vec();
    data.data = host.data_ptr();
    data.nbytes = host.nbytes();
    tensors.push_back(data);
  }
  safetensors::write_file(path, tensors, metadata);
}

}  // namespace

std::string dtype_label(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return c10::toString(type);
  }
}

std::string model_class_name(const ProbeShape& shape, bool binary) { return shape.kind->reference_class(binary); }

std::map<std::string, std::string> model_config_metadata(const ProbeShape& shape, bool binary) {
  std::map<std::string, std::string> config = {{"model_class", model_class_name(shape, binary)},
                                               {"model_type", shape.kind->name()},
                                               {"input_dim", std::to_string(shape.input_dim)},
                                               {"dropout", number(shape.dropout)},
                                               {"format", "pt"}};
  Json kind_fields = Json::object();
  shape.kind->describe(shape, kind_fields);
  for (const auto& [key, value] : kind_fields.items()) config[key] = value.dump();
  if (!binary) config["num_classes"] = std::to_string(shape.outputs);
  return config;
}

namespace {

// What both indexes record: the probes' shape and how their activations were made (the model, the layer, the
// site, position, prompt suffix and cut), which inference repeats.
Json index_fields(const char* format, const ProbeShape& shape, bool binary, at::ScalarType dtype,
                  const activations::FileAttributes& attributes, const std::string& activations_path) {
  Json index = {{"format", format},
                {"version", 1},
                {"model_type", shape.kind->name()},
                {"model_class", model_class_name(shape, binary)},
                {"input_dim", shape.input_dim},
                {"dtype", dtype_label(dtype)},
                {"layer", attributes.layer},
                {"model_name", attributes.model_name},
                {"model_fingerprint", attributes.model_fingerprint},
                {"model_revision", attributes.model_revision},
                {"site", attributes.site},
                {"position", attributes.position},
                {"prompt_suffix", attributes.prompt_suffix},
                {"max_length", attributes.max_length},
                {"activations", activations_path}};
  shape.kind->describe(shape, index);
  return index;
}

}  // namespace

void save_probe(const std::string& path, const ProbeBank& bank, int64_t probe,
                const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (size_t i = 0; i < bank.specs().size(); ++i) named.emplace_back(bank.specs()[i].name, bank.parameter(i)[probe]);
  write_tensors(path, named, metadata);
}

void check_probe_file(const safetensors::File& file, const ProbeShape& shape) {
  std::vector<ParameterSpec> specs = parameter_specs(shape);
  for (const ParameterSpec& spec : specs) {
    const safetensors::TensorInfo* info = file.find(spec.name);
    if (info == nullptr) {
      fail("{}: missing tensor '{}' (a {} probe needs {})", file.path(), spec.name, shape.kind->name(),
           fmt::join(parameter_names(specs), ", "));
    }
    if (info->shape != spec.shape) {
      fail("{}: tensor '{}' has shape [{}], expected [{}]", file.path(), spec.name, fmt::join(info->shape, ", "),
           fmt::join(spec.shape, ", "));
    }
    tensor_dtype(info->dtype, spec.name, file.path());
  }
  for (const safetensors::TensorInfo& info : file.tensors()) {
    bool known = false;
    for (const ParameterSpec& spec : specs) known = known || spec.name == info.name;
    if (!known) fail("{}: unexpected tensor '{}' for a {} probe", file.path(), info.name, shape.kind->name());
  }
}

void load_probe(const safetensors::File& file, ProbeBank& bank, int64_t probe) {
  for (size_t i = 0; i < bank.specs().size(); ++i) {
    const ParameterSpec& spec = bank.specs()[i];
    const safetensors::TensorInfo& info = file.at(spec.name);
    at::ScalarType type = tensor_dtype(info.dtype, spec.name, file.path());
    at::Tensor host = at::from_blob(const_cast<uint8_t*>(file.data(info)), spec.shape, at::TensorOptions().dtype(type));
    // A probe with a NaN or infinite weight would score NaN and drop out of every ranking unseen.
    if (!at::isfinite(host).all().item<bool>()) {
      fail_input("{}: tensor '{}' holds NaN or infinite values; retrain this probe", file.path(), spec.name);
    }
    bank.parameter(i)[probe].copy_(host);
  }
}

void write_logits_check(const std::string& path, const at::Tensor& inputs, const at::Tensor& logits,
                        const std::vector<std::string>& labels, const std::vector<int64_t>& offsets) {
  std::map<std::string, std::string> metadata = {{"labels", dump_json(labels)},
                                                 {"note", "eval-mode logits [rows, outputs] of the saved probes"}};
  if (!offsets.empty()) {
    metadata["offsets"] = dump_json(offsets);
    metadata["note"] = "eval-mode logits [texts, outputs] of the saved probes; inputs are the token rows they read "
                       "of each text, at row offsets `offsets`";
  }
  write_tensors(path, {{"inputs", inputs.to(at::kFloat)}, {"logits", logits.to(at::kFloat)}}, metadata);
}

std::string binary_probe_file_name(const std::string& label) {
  std::string problem = data::label_file_name_problem(label);
  if (!problem.empty()) fail_input("label '{}' cannot name a probe file: {}", label, problem);
  return "probe_" + label + ".safetensors";
}

Json save_binary_probes(const std::string& directory, const BinaryTrainingResult& result,
                        const activations::FileAttributes& attributes, const std::string& activations_path) {
  const ProbeShape& shape = result.shape;
  Json probes = Json::array();
  std::vector<std::string> labels;
  for (size_t k = 0; k < result.labels.size(); ++k) {
    const TrainedLabel& t = result.labels[k];
    std::string file = binary_probe_file_name(t.label);
    double threshold_logit = t.val_tuned.threshold;
    auto best = static_cast<size_t>(t.history.best_epoch - 1);
    std::map<std::string, std::string> metadata = model_config_metadata(shape, true);
    metadata["label"] = t.label;
    metadata["action"] = t.label;  // the reference's metadata key
    metadata["label_index"] = std::to_string(t.label_index);
    metadata["layer"] = std::to_string(attributes.layer);
    metadata["epoch"] = std::to_string(t.history.best_epoch);
    metadata["val_auc"] = number(t.history.best_val_auc);
    metadata["val_accuracy"] = number(t.history.val_accuracy.at(best));
    metadata["val_loss"] = number(t.history.val_loss.at(best));
    metadata["threshold"] = number(metrics::sigmoid(threshold_logit));
    metadata["threshold_logit"] = number(threshold_logit);
    save_probe(directory + "/" + file, result.best, static_cast<int64_t>(k), metadata);
    labels.push_back(t.label);
    probes.push_back({{"label", t.label},
                      {"label_index", t.label_index},
                      {"file", file},
                      {"metrics_file", "metrics_" + t.label + ".json"},
                      {"threshold", metrics::sigmoid(threshold_logit)},
                      {"threshold_logit", threshold_logit},
                      {"val_auc", t.history.best_val_auc},
                      {"best_epoch", t.history.best_epoch}});
  }

  int64_t rows = result.check_offsets.empty() ? result.check_inputs.size(0)
                                              : static_cast<int64_t>(result.check_offsets.size()) - 1;
  int64_t columns = static_cast<int64_t>(result.labels.size());
  std::vector<float> logits(static_cast<size_t>(rows * columns));
  for (int64_t k = 0; k < columns; ++k) {
    for (int64_t row = 0; row < rows; ++row) logits[row * columns + k] = result.labels[k].check_logits.at(row);
  }
  write_logits_check(directory + "/logits_check.safetensors", result.check_inputs,
                     at::from_blob(logits.data(), {rows, columns}, at::kFloat), labels, result.check_offsets);

  Json skipped = Json::array();
  for (const SkippedLabel& s : result.skipped) skipped.push_back({{"label", s.label}, {"reason", s.reason}});
  Json index = index_fields(kIndexFormat, shape, true, result.best.values().scalar_type(), attributes, activations_path);
  index["labels"] = labels;
  index["probes"] = probes;
  index["skipped_labels"] = skipped;
  write_json_file(directory + "/" + kIndexFile, index);
  return index;
}

Json save_multiclass_index(const std::string& directory, const ProbeShape& shape, at::ScalarType dtype,
                           const std::vector<std::string>& class_names, int64_t best_epoch,
                           const activations::FileAttributes& attributes, const std::string& activations_path) {
  Json index = index_fields(kMulticlassIndexFormat, shape, false, dtype, attributes, activations_path);
  index["num_classes"] = shape.outputs;
  index["labels"] = class_names;
  index["file"] = kMulticlassProbeFile;
  index["best_epoch"] = best_epoch;
  write_json_file(directory + "/" + kIndexFile, index);
  return index;
}

namespace {

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

// The settings inference reads from probes.json, checked once for their types: strings, and a layer and a
// max_length that are integers.
void check_recorded_settings(const Json& index, const std::string& where) {
  json_value<int64_t>(index, "layer", -1, where);
  if (json_value<int64_t>(index, "max_length", 0, where) < 0) fail("{}: 'max_length' must not be negative", where);
  for (const char* key : {"site", "position", "prompt_suffix", "model_name", "model_revision", "model_fingerprint"}) {
    json_value<std::string>(index, key, "", where);
  }
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

ProbeSet::ProbeSet(ProbeBank bank, std::vector<ProbeInfo> probes, Json index, bool multiclass)
    : bank_(std::move(bank)), probes_(std::move(probes)), index_(std::move(index)), multiclass_(multiclass) {}

ProbeSet ProbeSet::load(const std::string& directory, at::Device device, at::ScalarType dtype) {
  std::string index_path = directory + "/" + kIndexFile;
  if (!is_regular_file(index_path)) {
    fail_input("{}: no {} (is this a directory written by train_binary_probes or train_probes? with several layers, "
               "pick one layer_{{L}} folder)",
               directory, kIndexFile);
  }
  Json index = read_json_file(index_path);
  std::vector<ProbeInfo> probes;
  ProbeShape shape;
  bool multiclass = false;
  try {
    const Json& format = index.at("format");
    multiclass = format == kMulticlassIndexFormat;
    if (!multiclass && format != kIndexFormat) fail("unknown format {}", format.dump());
    check_recorded_settings(index, index_path);
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
  return ProbeSet(std::move(bank), std::move(probes), std::move(index), multiclass);
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

TokenLayout ProbeSet::token_layout(const std::vector<int64_t>& offsets) const {
  return probes::token_layout(offsets, bank_.shape());
}

at::Tensor ProbeSet::token_logits(const at::Tensor& rows, const std::vector<int64_t>& offsets,
                                  at::Tensor* weights) const {
  const ProbeKind& kind = *bank_.shape().kind;
  if (!kind.reads_every_token()) fail_input("{} probes read one row per text, not every token", kind.name());
  if (rows.dim() != 2 || rows.size(1) != bank_.shape().input_dim || offsets.empty() || offsets.back() != rows.size(0)) {
    fail_input("probe input must be [rows, {}] with offsets ending at its rows, got [{}] and {} offsets",
               bank_.shape().input_dim, fmt::join(rows.sizes(), ", "), offsets.size());
  }
  at::Tensor input = rows.to(bank_.values().device(), bank_.values().scalar_type());
  TokenLayout layout = token_layout(offsets);
  if (weights == nullptr) return probes::token_logits(bank_, input, layout).reshape({layout.texts(), -1});
  std::vector<int64_t> texts(static_cast<size_t>(layout.texts()));
  for (int64_t e = 0; e < layout.texts(); ++e) texts[e] = e;
  TrainActivations saved = kind.forward_tokens(bank_, token_batch(input, token_index(layout, texts.data(), layout.texts())));
  *weights = kind.token_weights(bank_, saved);
  return saved.logits.reshape({layout.texts(), -1});
}

at::Tensor ProbeSet::direction(size_t index) const {
  const auto output = static_cast<int64_t>(index);
  return multiclass_ ? bank_.shape().kind->direction(bank_, 0, output) : bank_.shape().kind->direction(bank_, output, 0);
}

at::Tensor ProbeSet::probabilities(const at::Tensor& activations) const {
  at::Tensor logits = this->logits(activations).to(at::kFloat);
  return multiclass_ ? at::softmax(logits, 1) : at::sigmoid(logits);
}

}  // namespace probekit::probes
