// The package's functions over the tools' libraries: capture_activations and train_binary_probes take the tools'
// flags (declared once, in capture/capture_flags and probes/training_flags), read_activations reads a layer's file,
// and the built-in example's checkpoint and dataset are written as make_example writes them.
#include <map>
#include <utility>

#include "activations/activation_store.h"
#include "capture/capture.h"
#include "capture/capture_flags.h"
#include "capture/summary.h"
#include "common/json.h"
#include "data/example_generator.h"
#include "model/random_checkpoint.h"
#include "native.h"
#include "probes/training_flags.h"

namespace probekit::python {

namespace {

// capture_activations with `flags` (spelled as on its command line); a loaded `model` is captured with as it is.
std::string capture_activations(const std::optional<ModelHandle>& model, const std::vector<std::string>& flags,
                                const py::object& progress) {
  CLI::App app("capture_activations");
  capture::CaptureFlags parsed;
  capture::add_capture_flags(app, parsed);
  parse_flags(app, flags);
  capture::CaptureOptions options = parsed.resolve();
  if (model) options.loaded = model->get();
  ProgressScope scope(progress);
  py::gil_scoped_release release;
  return dump_json(capture::summary_json(capture::run_capture(options)));
}

// train_binary_probes with `flags`; returns the summary its --json prints.
std::string train_binary_probes(const std::vector<std::string>& flags, const py::object& progress) {
  CLI::App app("train_binary_probes");
  probes::BinaryRunOptions options;
  probes::add_binary_training_flags(app, options);
  parse_flags(app, flags);
  ProgressScope scope(progress);
  py::gil_scoped_release release;
  return dump_json(probes::run_binary_training(options));
}

// A host tensor that owns `values` (moved in, not copied), as a DLPack capsule.
template <typename T>
py::capsule adopt(std::vector<T>&& values, std::vector<int64_t> shape, at::ScalarType dtype) {
  auto* owner = new std::vector<T>(std::move(values));
  at::Tensor tensor = at::from_blob(owner->data(), shape, [owner](void*) { delete owner; },
                                    at::TensorOptions().dtype(dtype));
  return to_dlpack(tensor);
}

// The optional arrays a file holds. A split without examples holds them too, empty, where the reader cannot tell an
// empty array from a missing one: what the other splits hold says.
struct HeldArrays {
  bool expert_choices = false, example_index = false, positions = false, token_labels = false;
};

HeldArrays held_arrays(const activations::ActivationFile& file) {
  HeldArrays held;
  held.expert_choices = file.attributes.holds_expert_choices();
  for (const activations::SplitData& split : file.splits) {
    held.example_index |= !split.example_index.empty();
    held.positions |= !split.positions.empty();
    held.token_labels |= !split.token_labels.empty();
  }
  return held;
}

py::dict split_dict(activations::SplitData& split, const HeldArrays& held) {
  const auto examples = split.examples();
  py::dict out;
  if (!held.expert_choices) {
    out["activations"] = adopt(std::move(split.activations), {split.rows, split.hidden}, at::kFloat);
  } else {
    // The reader's `hidden` of a router's choices is their width, k.
    out["expert_ids"] = adopt(std::move(split.expert_ids), {split.rows, split.hidden}, at::kInt);
    out["expert_weights"] = adopt(std::move(split.expert_weights), {split.rows, split.hidden}, at::kFloat);
  }
  out["labels"] = adopt(std::move(split.labels), {examples}, at::kLong);
  if (held.example_index) out["example_index"] = adopt(std::move(split.example_index), {examples}, at::kLong);
  if (!split.offsets.empty()) {  // position "all": offsets [examples + 1], [0] without examples
    out["offsets"] = adopt(std::move(split.offsets), {examples + 1}, at::kLong);
    out["token_ids"] = adopt(std::move(split.token_ids), {split.rows}, at::kLong);
    if (held.positions) out["positions"] = adopt(std::move(split.positions), {split.rows}, at::kLong);
    if (held.token_labels) out["token_labels"] = adopt(std::move(split.token_labels), {split.rows}, at::kLong);
  }
  // Metadata columns apart, as in the file (group metadata): a column may have any name, "labels" too.
  if (!split.metadata.empty()) {
    py::dict columns;
    for (auto& [field, values] : split.metadata) columns[py::str(field)] = std::move(values);
    out["metadata"] = columns;
  }
  return out;
}

py::dict attributes_dict(const activations::FileAttributes& a) {
  py::dict out;
  out["layers"] = a.layers;
  out["layer"] = a.layer;
  out["label_names"] = a.label_names;
  out["hidden_size"] = a.hidden_size;
  out["dataset"] = a.dataset;
  return out;
}

// (each split's arrays, the file's attributes, its readout recipe as JSON text).
py::tuple read_activations(const std::string& path) {
  activations::ActivationFile file;
  {
    py::gil_scoped_release release;
    file = activations::read_activation_file(path);
  }
  const HeldArrays held = held_arrays(file);
  py::dict splits;
  for (activations::Split split : activations::kSplits) {
    splits[activations::split_name(split)] = split_dict(file.split(split), held);
  }
  return py::make_tuple(splits, attributes_dict(file.attributes), file.attributes.recipe.to_json().dump());
}

void write_example_model(const std::string& output, const std::string& tokenizer_json, int64_t hidden_size,
                         int64_t layers, uint64_t seed, bool overwrite) {
  model::RandomCheckpointOptions options;
  options.tokenizer_json = tokenizer_json;
  options.hidden_size = hidden_size;
  options.layers = layers;
  options.seed = seed;
  options.overwrite = overwrite;
  py::gil_scoped_release release;
  model::write_random_checkpoint(output, options);
}

size_t write_example_dataset(const std::string& output, int64_t labels, int64_t per_label, uint64_t seed,
                             bool overwrite) {
  data::ExampleSetOptions options;
  options.labels = labels;
  options.per_label = per_label;
  options.seed = seed;
  py::gil_scoped_release release;
  return data::write_example_dataset(output, options, overwrite);
}

}  // namespace

void bind_tools(py::module_& module) {
  module.def("capture_activations", &capture_activations, py::arg("model"), py::arg("flags"), py::arg("progress"));
  module.def("train_binary_probes", &train_binary_probes, py::arg("flags"), py::arg("progress"));
  module.def("read_activations", &read_activations, py::arg("path"));
  module.def("write_example_model", &write_example_model, py::arg("output"), py::arg("tokenizer_json"),
             py::arg("hidden_size"), py::arg("layers"), py::arg("seed"), py::arg("overwrite"));
  module.def("write_example_dataset", &write_example_dataset, py::arg("output"), py::arg("labels"),
             py::arg("per_label"), py::arg("seed"), py::arg("overwrite"));
}

}  // namespace probekit::python
