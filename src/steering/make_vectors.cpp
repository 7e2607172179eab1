#include "steering/make_vectors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "activations/activation_store.h"
#include "common/error.h"
#include "common/json.h"
#include "hub/resolve.h"
#include "common/outputs.h"
#include "probes/probe_catalog.h"
#include "probes/probe_files.h"
#include "cli/cli.h"
#include "sites/layers.h"

namespace probekit::steering {

namespace {

int64_t label_index(const activations::FileAttributes& attributes, const std::string& label, const std::string& path) {
  auto found = std::find(attributes.label_names.begin(), attributes.label_names.end(), label);
  if (found == attributes.label_names.end()) {
    fail_usage("--label {}: {} has no such label (its labels: {})", label, path, fmt::join(attributes.label_names, ", "));
  }
  return found - attributes.label_names.begin();
}

// mean(rows of the label) - mean(the other rows) of a file's train split, in doubles; per-token files give each
// token's row its example's label.
std::vector<float> mean_difference(const activations::ActivationFile& file, int64_t label, const std::string& name) {
  const activations::SplitData& train = file.split(activations::Split::kTrain);
  const auto hidden = static_cast<size_t>(train.hidden);
  std::vector<double> sums[2] = {std::vector<double>(hidden), std::vector<double>(hidden)};
  int64_t counts[2] = {0, 0};
  for (size_t example = 0; example < train.labels.size(); ++example) {
    const int side = train.labels[example] == label ? 1 : 0;
    const int64_t first = train.offsets.empty() ? static_cast<int64_t>(example) : train.offsets[example];
    const int64_t end = train.offsets.empty() ? first + 1 : train.offsets[example + 1];
    for (int64_t row = first; row < end; ++row) {
      const float* values = train.activations.data() + static_cast<size_t>(row) * hidden;
      for (size_t j = 0; j < hidden; ++j) sums[side][j] += values[j];
      ++counts[side];
    }
  }
  if (counts[0] == 0 || counts[1] == 0) {
    fail_input("{}: the train split has no rows {} the label '{}'", file.path, counts[1] == 0 ? "of" : "other than", name);
  }
  std::vector<float> difference(hidden);
  for (size_t j = 0; j < hidden; ++j) {
    difference[j] = static_cast<float>(sums[1][j] / static_cast<double>(counts[1]) - sums[0][j] / static_cast<double>(counts[0]));
  }
  return difference;
}

// llama.cpp's control vectors and repeng's name the model by its type in controlvector.model_hint ("gemma3_text"),
// and loaders compare it with theirs. The recorded model's config.json has it, from its folder or the hub cache
// (never the network); where neither holds one, the recorded name stands in.
std::string model_type_of(const std::string& model_name) {
  try {
    hub::HubSettings settings = hub::settings_from_environment();
    settings.offline = true;
    const std::string config = hub::resolve_model(model_name, settings).dir + "/config.json";
    const Json type = read_json_file(config).value("model_type", Json());
    if (type.is_string()) return type.get<std::string>();
  } catch (const std::exception& error) {
    spdlog::debug("model_hint: no config.json of {} at hand ({}); the name stands in", model_name, error.what());
  }
  return model_name;
}

// The layers --layers keeps, of those up to `layers` (empty: all of them).
std::vector<int64_t> wanted_layers(const std::string& text, int64_t layers) {
  if (text.empty() || text == "all") return {};
  return parse_index_list("--layers", text, layers, "layer", "input");
}

// Refuses a layer --layers names that `source` lacks (regression: left out of the file without a word), listing
// every layer it has.
void check_layers_found(const std::vector<int64_t>& wanted, const std::vector<int64_t>& available,
                        const std::string& source) {
  for (int64_t layer : wanted) {
    if (std::find(available.begin(), available.end(), layer) == available.end()) {
      fail_usage("--layers: {} has no layer {} (its layers: {})", source, layer, fmt::join(available, ", "));
    }
  }
}

VectorFile from_activations(const MakeVectorsOptions& o) {
  VectorFile out;
  const std::vector<std::string> paths = activations::find_activation_files({o.activations});
  std::vector<activations::FileAttributes> files;
  int64_t layers = 0;
  for (const std::string& path : paths) {
    files.push_back(activations::read_attributes(path));
    layers = std::max(layers, files.back().layer + 1);
  }
  const std::vector<int64_t> wanted = wanted_layers(o.layers, layers);
  std::vector<int64_t> available;
  for (const activations::FileAttributes& attributes : files) available.push_back(attributes.layer);
  check_layers_found(wanted, available, o.activations);
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    const activations::FileAttributes& attributes = files[i];
    if (attributes.recipe.site != Site::kResidPost || attributes.recipe.sae) {
      fail_input("{}: read at site {}; steering writes a layer's output ({}), so its vector comes from rows of that site",
                 path, attributes.recipe.site_text(), site_name(Site::kResidPost));
    }
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), attributes.layer) == wanted.end()) continue;
    const activations::ActivationFile file = activations::read_activation_file(path);
    out.layers[attributes.layer] = mean_difference(file, label_index(attributes, o.label, path), o.label);
    out.model_hint = attributes.recipe.model_name;
  }
  return out;
}

VectorFile from_probes(const MakeVectorsOptions& o) {
  const probes::ProbeCatalog catalog = probes::find_probes(o.probes_dir);
  const std::vector<int64_t> wanted =
      wanted_layers(o.layers, catalog.layer_dirs.empty() ? 0 : catalog.layer_dirs.rbegin()->first + 1);
  std::vector<int64_t> available;
  for (const auto& entry : catalog.layer_dirs) available.push_back(entry.first);
  check_layers_found(wanted, available, o.probes_dir);
  VectorFile out;
  for (const auto& [layer, dir] : catalog.layer_dirs) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), layer) == wanted.end()) continue;
    const probes::ProbeSet set = probes::ProbeSet::load(dir, at::kCPU, at::kFloat);
    auto found = std::find_if(set.probes().begin(), set.probes().end(),
                              [&](const probes::ProbeInfo& p) { return p.label == o.label; });
    if (found == set.probes().end()) {
      fail_usage("--label {}: {} has no probe for it (its labels: {})", o.label, dir, fmt::join(set.labels(), ", "));
    }
    const at::Tensor direction = set.direction(static_cast<size_t>(found - set.probes().begin())).contiguous();
    out.layers[layer] = std::vector<float>(direction.data_ptr<float>(), direction.data_ptr<float>() + direction.numel());
    out.model_hint = set.recipe().model_name;
  }
  return out;
}

// One way to make a label's vectors: its --method name, what it reads (the flag and the option holding it) and how.
struct VectorMethod {
  const char* name;
  const char* meaning;
  const char* source_flag;
  std::string MakeVectorsOptions::*source;
  VectorFile (*make)(const MakeVectorsOptions&);
};

const std::vector<VectorMethod>& vector_methods() {
  static const std::vector<VectorMethod> methods = {
      {"mean-diff", "mean of the label's train rows minus the other rows' (as it is, not normalized)", "--activations",
       &MakeVectorsOptions::activations, from_activations},
      {"probe", "the label's probe directions (unit length)", "--probes-dir", &MakeVectorsOptions::probes_dir,
       from_probes},
  };
  return methods;
}

const VectorMethod& vector_method(const std::string& name) {
  for (const VectorMethod& method : vector_methods()) {
    if (name == method.name) return method;
  }
  fail_usage("--method {}: not a method of make_steering_vectors", name);
}

}  // namespace

void add_make_vectors_flags(CLI::App& app, MakeVectorsOptions& o) {
  app.add_option("--label", o.label, "The label whose vector to make")->required();
  std::vector<std::string> names;
  std::string meanings;
  for (const VectorMethod& method : vector_methods()) {
    names.push_back(method.name);
    meanings += fmt::format("{}{}: {}", meanings.empty() ? "" : "; ", method.name, method.meaning);
  }
  app.add_option("--method", o.method, meanings)->check(CLI::IsMember(names))->capture_default_str();
  app.add_option("--activations", o.activations, "mean-diff: a capture's output directory or layer_{L}_activations.h5");
  app.add_option("--probes-dir", o.probes_dir, "probe: the probes directory (probes.json, or layer_{L}/ folders)");
  add_layers_option(app, o.layers, "A subset of the layers: 8 17, 8,17, 21-30 or all (default: every one there is)");
  app.add_option("--output", o.output, "FILE.safetensors (layer.{L}) or FILE.gguf (a llama.cpp control vector)")->required();
  app.add_flag("--overwrite", o.overwrite, "Replace an existing --output");
}

VectorFile make_vectors(const MakeVectorsOptions& o) {
  const VectorMethod& method = vector_method(o.method);
  const std::string& source = o.*method.source;
  if (source.empty()) fail_usage("--method {} needs {}", method.name, method.source_flag);
  // Another method's input is not read: said, not ignored (regression: --probes-dir beside mean-diff was dropped).
  for (const VectorMethod& other : vector_methods()) {
    if (other.source != method.source && !(o.*other.source).empty()) {
      fail_usage("{} is read by --method {} only, and --method is {}", other.source_flag, other.name, method.name);
    }
  }
  VectorFile out = method.make(o);
  if (out.layers.empty()) fail_usage("--layers {}: no layer of {} is among them", o.layers, source);
  out.metadata = {{"method", o.method}, {"label", o.label}, {"source", source}, {"model", out.model_hint}};
  out.model_hint = model_type_of(out.model_hint);
  return out;
}

Json make_and_write_vectors(const MakeVectorsOptions& o) {
  check_output_file(o.output, o.overwrite);
  const VectorFile vectors = make_vectors(o);
  write_vector_file(o.output, vectors);
  Json layers = Json::array();
  for (const auto& [layer, values] : vectors.layers) {
    double squares = 0;
    for (float v : values) squares += static_cast<double>(v) * v;
    layers.push_back({{"layer", layer}, {"norm", std::sqrt(squares)}});
  }
  return {{"output", o.output}, {"method", o.method}, {"label", o.label}, {"layers", layers}};
}

}  // namespace probekit::steering
