#include "probes/probe_catalog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <regex>
#include <set>

#include "sites/layers.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace probekit::probes {

namespace {

constexpr const char* kIndex = "probes.json";

// The sorted entries of a probes directory; a missing one is the caller's mistake, named as such.
std::vector<std::string> probe_dir_entries(const std::string& dir) {
  if (!is_directory(dir)) fail_input("{}: no such directory", dir);
  return list_directory(dir);
}

// A probes.json's layer; -1 when it records none.
int64_t recorded_layer(const std::string& dir) {
  std::string path = dir + "/" + kIndex;
  return json_value<int64_t>(read_json_file(path), "layer", -1, path);
}

// The layer of a folder named layer_{L} holding probes.json in `dir`; -1 for any other entry.
int64_t probe_layer_folder(const std::string& dir, const std::string& name) {
  static const std::regex layer_dir(R"(layer_(\d{1,9}))");  // more digits: no layer's (nor an int64)
  std::smatch match;
  if (!std::regex_match(name, match, layer_dir) || !is_regular_file(dir + "/" + name + "/" + kIndex)) return -1;
  return std::stoll(match[1].str());
}

// Whether `dir` holds probes as find_probes reads them: probes.json, or a layer_{L}/probes.json.
bool holds_probes(const std::string& dir) {
  if (is_regular_file(dir + "/" + kIndex)) return true;
  if (!is_directory(dir)) return false;
  for (const std::string& name : list_directory(dir)) {
    if (probe_layer_folder(dir, name) >= 0) return true;
  }
  return false;
}

// Why `dir` holds no probes: pickled ones, or several kinds' folders (train_binary_probes --model-type a,b), or none.
[[noreturn]] void fail_no_probes(const std::string& dir, const std::vector<std::string>& names, bool pickles) {
  if (pickles) {
    fail_input("{}: holds pickled PyTorch probes (probe_*.pth); probekit never unpickles files (that can run "
               "arbitrary code). Convert them once with: python3 scripts/convert_reference_probes.py {}",
               dir, dir);
  }
  std::vector<std::string> kinds;
  for (const std::string& name : names) {
    // Not a layer_ folder: one find_probes did not read is no other kind's either (its layer number is past any).
    if (name.rfind("layer_", 0) != 0 && holds_probes(dir + "/" + name)) kinds.push_back(name);
  }
  if (!kinds.empty()) {
    fail_input("{}: holds no probes itself, but in {} ({}): pass {}, as {}/{}", dir,
               kinds.size() == 1 ? "a folder" : "a folder of each kind", fmt::join(kinds, ", "),
               kinds.size() == 1 ? "it" : "one of them", dir, kinds.front());
  }
  fail_input("{}: no probes.json and no layer_{{L}}/probes.json (train probes with train_binary_probes or "
             "train_probes)",
             dir);
}

}  // namespace

ProbeCatalog find_probes(const std::string& dir) {
  ProbeCatalog catalog;
  catalog.dir = dir;
  std::vector<std::string> names = probe_dir_entries(dir);
  bool pickles = false;
  for (const std::string& name : names) {
    const int64_t layer = probe_layer_folder(dir, name);
    if (layer >= 0) catalog.layer_dirs[layer] = dir + "/" + name;
    pickles = pickles || (name.rfind("probe_", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".pth");
  }
  if (is_regular_file(dir + "/" + kIndex)) catalog.layer_dirs[recorded_layer(dir)] = dir;
  if (catalog.layer_dirs.empty()) fail_no_probes(dir, names, pickles);
  std::string analysis = dir + "/per_action_layer_analysis.json";
  if (is_regular_file(analysis)) {
    const Json json = read_json_file(analysis);
    if (!json.is_object()) fail_input("{}: expected a JSON object holding 'per_action_best_layers'", analysis);
    const Json entries = json.value("per_action_best_layers", Json::array());
    if (!entries.is_array()) fail_json_type(analysis, "per_action_best_layers", "a list", entries);
    for (const Json& entry : entries) {
      catalog.best_layer[json_at<std::string>(entry, "action", analysis)] = json_at<int64_t>(entry, "best_layer", analysis);
    }
  }
  return catalog;
}

std::vector<int64_t> select_layers(const ProbeCatalog& catalog, const std::string& selection, int64_t single_layer,
                                   bool best_layer_mode) {
  std::vector<int64_t> available;
  for (const auto& [layer, dir] : catalog.layer_dirs) available.push_back(layer);
  std::vector<int64_t> layers;
  if (single_layer >= 0) {
    layers = {single_layer};
  } else if (best_layer_mode) {
    if (catalog.best_layer.empty()) {
      fail_input("{}: --best-layer needs per_action_layer_analysis.json (written by train_binary_probes for several "
                 "layers)",
                 catalog.dir);
    }
    std::set<int64_t> best;
    for (const auto& [label, layer] : catalog.best_layer) best.insert(layer);
    layers.assign(best.begin(), best.end());
  } else if (selection.empty() || selection == "all") {
    layers = available;
  } else {
    // Any layer number: one without probes is named below, with the layers that have them. A range past a bound no
    // model reaches is refused before it is spelled out.
    constexpr int64_t kLayerBound = int64_t{1} << 16;
    layers = parse_index_list("--layers", selection, kLayerBound, "layer", "");
  }
  for (int64_t layer : layers) {
    if (!catalog.layer_dirs.count(layer)) {
      // A single-layer directory's probes may be run on another layer's activations on purpose.
      if (single_layer >= 0 && catalog.layer_dirs.size() == 1) continue;
      fail_usage("{}: no probes for layer {} (probes exist for layers {})", catalog.dir, layer, fmt::join(available, ", "));
    }
  }
  return layers;
}

}  // namespace probekit::probes
