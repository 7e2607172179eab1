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

// What both indexes record: the probes' shape, the layer and how their activations were read (the readout
// recipe: model, site, position, prompt suffix, cut, steering), which inference repeats.
Json index_fields(const char* format, const ProbeShape& shape, bool binary, at::ScalarType dtype,
                  const activations::FileAttributes& attributes, const std::string& activations_path) {
  Json index = {{"format", format},
                {"version", 1},
                {"model_type", shape.kind->name()},
                {"model_class", model_class_name(shape, binary)},
                {"input_dim", shape.input_dim},
                {"dtype", dtype_label(dtype)},
                {"layer", attributes.layer},
                {kReadoutKey, attributes.recipe.to_json()},
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
  Json index = index_fields(kBinaryIndexFormat, shape, true, result.best.values().scalar_type(), attributes, activations_path);
  index["labels"] = labels;
  index["probes"] = probes;
  index["skipped_labels"] = skipped;
  write_json_file(directory + "/" + kProbeIndexFile, index);
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
  write_json_file(directory + "/" + kProbeIndexFile, index);
  return index;
}

}  // namespace probekit::probes
