// The table of SAE layouts: how each is recognised by its files, and its reader. A new layout is a reader file and a
// row here.
#include <algorithm>
#include <regex>

#include "common/error.h"
#include "common/files.h"
#include "hub/hub_name.h"
#include "hub/resolve.h"
#include "model/weights.h"
#include "sae/layout_readers.h"

namespace probekit::sae {

namespace {

struct Layout {
  const char* name;
  const char* where;               // where its files sit in a release, for messages ("" when in the folder itself)
  std::vector<std::string> files;  // what identifies it: all present in the folder (small files first)
  SparseAutoencoder (*read)(const std::string& dir);
};

bool has(const std::string& dir, const std::string& file) { return is_regular_file(dir + "/" + file); }

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> table = {
      {"saelens", "", {"cfg.json", "sae_weights.safetensors"}, read_saelens},
      {"gemma_scope", " (in layer_L/width_W/average_l0_N/)", {"params.npz"}, read_gemma_scope},
      {"gemma_scope_2", "", {"config.json", "params.safetensors"}, read_gemma_scope_2},
      {"sparsify", "", {"cfg.json", "sae.safetensors"}, read_sparsify},
      {"llama_scope", "", {"hyperparams.json", "checkpoints/final.safetensors"}, read_llama_scope},
  };
  return table;
}

bool recognises(const Layout& layout, const std::string& dir) {
  return std::all_of(layout.files.begin(), layout.files.end(), [&](const std::string& f) { return has(dir, f); });
}

// A hub folder (org/name/sub/folder[@revision]) from the hub cache, downloaded with one layout's files if need be.
// A mistyped local path reads as one too: the message says it was looked for both ways.
std::string hub_folder(const std::string& path) {
  std::vector<std::vector<std::string>> file_sets;
  for (const Layout& layout : layouts()) file_sets.push_back(layout.files);
  try {
    return hub::resolve_folder(path, file_sets, hub::settings_from_environment()).dir;
  } catch (const std::exception& e) {
    fail_input("--sae {}: no such folder here, and as a hub folder (org/name/sub/folder): {}", path, e.what());
  }
}

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void check_shape(const std::vector<int64_t>& found, const std::vector<int64_t>& shape, const std::string& name,
                 const std::string& path) {
  // A scalar threshold broadcasts (Llama Scope's, BatchTopK's), stored as [] or [1].
  const bool scalar_for_vector = shape.size() == 1 && count(found) == 1 && name.find("threshold") != std::string::npos;
  if (found != shape && !scalar_for_vector) {
    fail_input("{}: tensor '{}' has shape [{}], expected [{}]", path, name, fmt::join(found, ", "), fmt::join(shape, ", "));
  }
}

}  // namespace

at::Tensor read_tensor(const safetensors::File& file, const std::string& name, const std::vector<int64_t>& shape) {
  const safetensors::TensorInfo* info = file.find(name);
  if (info == nullptr) fail_input("{}: no tensor '{}'", file.path(), name);
  check_shape(info->shape, shape, name, file.path());
  const at::ScalarType type = model::aten_dtype(info->dtype);
  // FP8 comes as its raw bytes, and integers are no weights: converted, either would give wrong latents.
  if (!at::isFloatingType(type)) {
    fail_input("{}: tensor '{}' is {}: SAE weights are read in F64, F32, F16 or BF16", file.path(), name,
               safetensors::dtype_name(info->dtype));
  }
  return at::from_blob(const_cast<uint8_t*>(file.data(*info)), info->shape, at::TensorOptions().dtype(type))
      .to(at::kFloat)
      .clone();
}

at::Tensor read_array(const std::map<std::string, npz::Array>& arrays, const std::string& name,
                      const std::vector<int64_t>& shape, const std::string& path) {
  auto found = arrays.find(name);
  if (found == arrays.end()) fail_input("{}: no array '{}'", path, name);
  const npz::Array& a = found->second;
  check_shape(a.shape, shape, name, path);
  static const std::map<npz::DType, at::ScalarType> types = {{npz::DType::kF16, at::kHalf}, {npz::DType::kF32, at::kFloat},
                                                             {npz::DType::kF64, at::kDouble}, {npz::DType::kI32, at::kInt},
                                                             {npz::DType::kI64, at::kLong}};
  return at::from_blob(const_cast<uint8_t*>(a.bytes.data()), a.shape, at::TensorOptions().dtype(types.at(a.dtype)))
      .to(at::kFloat)
      .clone();
}

Json read_config(const std::string& path) {
  Json config = read_json_file(path);
  if (!config.is_object()) fail_input("{}: expected a JSON object (the SAE's config), got {}", path, config.type_name());
  return config;
}

int64_t config_int(const Json& config, const std::string& field, const std::string& path) {
  return json_at<int64_t>(config, field, path);
}

double config_number(const Json& config, const std::string& field, const std::string& path) {
  return json_at<double>(config, field, path);
}

std::string config_string(const Json& config, const std::string& field, const std::string& path) {
  return json_at<std::string>(config, field, path);
}

namespace {

// (site, layer) of a hook, as read_input_site describes.
std::pair<Site, int64_t> hook_site(const std::string& hook, const std::string& where) {
  static const std::vector<std::pair<std::regex, Site>> names = {
      {std::regex(R"(blocks\.(\d+)\.hook_resid_post)"), Site::kResidPost},
      {std::regex(R"(blocks\.(\d+)\.hook_resid_pre)"), Site::kResidPre},
      {std::regex(R"(blocks\.(\d+)\.hook_resid_mid)"), Site::kResidMid},
      {std::regex(R"(blocks\.(\d+)\.hook_mlp_out)"), Site::kMlpOut},
      {std::regex(R"(blocks\.(\d+)\.hook_attn_out)"), Site::kAttnOut},
      {std::regex(R"(blocks\.(\d+)\.ln2\.hook_normalized)"), Site::kLn2Normalized},
      {std::regex(R"(blocks\.(\d+)\.mlp\.hook_in)"), Site::kMlpIn},
      {std::regex(R"((?:model\.(?:language_model\.)?)?layers\.(\d+)\.(?:pre_feedforward_layernorm\.output|mlp\.input))"),
       Site::kMlpIn},
      {std::regex(R"((?:model\.(?:language_model\.)?)?layers\.(\d+)(?:\.output)?)"), Site::kResidPost},
      {std::regex(R"((?:model\.(?:language_model\.)?)?layers\.(\d+)\.input)"), Site::kResidPre},
      {std::regex(R"((?:model\.(?:language_model\.)?)?layers\.(\d+)\.(?:post_feedforward_layernorm\.output|mlp(?:\.output)?))"),
       Site::kMlpOut},
      {std::regex(R"((?:model\.(?:language_model\.)?)?layers\.(\d+)\.(?:post_attention_layernorm\.output|self_attn(?:\.output)?))"),
       Site::kAttnOut},
  };
  if (hook.find("hook_z") != std::string::npos || hook.find("o_proj.input") != std::string::npos) {
    fail_input("{}: hook '{}' is attention's per-head output (hook_z): SAEs there are not read (read: the residual "
               "stream, attn_out and mlp_out)", where, hook);
  }
  std::smatch match;
  for (const auto& [pattern, site] : names) {
    if (!std::regex_match(hook, match, pattern)) continue;
    const std::string layer = match[1].str();
    if (layer.size() > 7) fail_input("{}: hook '{}' names layer {}, past any model's layers", where, hook, layer);
    return {site, std::stoll(layer)};
  }
  fail_input("{}: hook '{}' names no site this runtime reads (blocks.L.hook_resid_post, model.layers.L.output, ...)",
             where, hook);
}

// Whether a hook is a Hugging Face attention or MLP module's own output: on Gemma 2/3 that is before the post-norm,
// which attn_out and mlp_out are after.
bool names_module_output(const std::string& hook) {
  static const std::regex module(R"((?:model\.(?:language_model\.)?)?layers\.\d+\.(?:mlp|self_attn)(?:\.output)?)");
  return std::regex_match(hook, module);
}

}  // namespace

void read_input_site(SparseAutoencoder& sae, const std::string& hook, const std::string& where) {
  std::tie(sae.site, sae.layer) = hook_site(hook, where);
  sae.raw_module_output = names_module_output(hook);
}

void read_output_site(SparseAutoencoder& sae, const std::string& hook, const std::string& where) {
  const auto [site, layer] = hook_site(hook, where);
  if (layer != sae.layer) {
    fail_input("{}: the transcoder reads layer {} and reconstructs layer {} ('{}'): only one layer's MLP is read", where,
               sae.layer, layer, hook);
  }
  sae.output_site = site;
  sae.raw_module_output = names_module_output(hook);
}

std::string folder_name(const std::string& dir) {
  auto last_component = [](const std::string& p) {
    const size_t slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  };
  const std::string last = last_component(dir);
  if (last == "." || last == ".." || last.empty()) return last_component(absolute_path(dir));
  return last;
}

namespace {

// Whether `path` names `file` of a layout ("checkpoints/final.safetensors" as ".../checkpoints/final.safetensors").
bool names_file(const std::string& path, const std::string& file) {
  return path == file || (path.size() > file.size() && path.compare(path.size() - file.size(), file.size(), file) == 0 &&
                          path[path.size() - file.size() - 1] == '/');
}

// The layout whose files `dir` holds (null: none). A folder holding two layouts' files is read as the one whose file
// was given (`file`, "" for the folder), else refused: reading either would be a guess.
const Layout* choose_layout(const std::string& dir, const std::string& file) {
  std::vector<const Layout*> found;
  for (const Layout& layout : layouts()) {
    if (recognises(layout, dir)) found.push_back(&layout);
  }
  std::vector<const Layout*> chosen;
  for (const Layout* layout : found) {
    auto given = [&](const std::string& f) { return names_file(file, f); };
    if (!file.empty() && std::any_of(layout->files.begin(), layout->files.end(), given)) chosen.push_back(layout);
  }
  if (chosen.size() == 1) return chosen.front();
  if (found.size() <= 1) return found.empty() ? nullptr : found.front();
  std::vector<std::string> files;
  for (const Layout* layout : found) files.push_back(fmt::format("{}/{} ({})", dir, layout->files.back(), layout->name));
  fail_input("{}: holds the files of {} SAE layouts: give the file of the one to read: {}", dir, found.size(),
             fmt::join(files, ", "));
}

}  // namespace

SparseAutoencoder load(const std::string& path, const std::string& name) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "folder/"
  if (!path_exists(dir) && hub::parse_hub_folder(dir)) dir = hub_folder(dir);
  if (is_regular_file(dir)) dir = parent_directory(dir).empty() ? "." : parent_directory(dir);
  // Llama Scope's weights sit in the SAE's checkpoints/ folder, beside which its hyperparams.json is.
  if (folder_name(dir) == "checkpoints" && has(parent_directory(dir), "hyperparams.json")) dir = parent_directory(dir);
  if (!is_directory(dir)) fail_input("--sae {}: no such folder or file", path);
  const Layout* layout = choose_layout(dir, is_regular_file(path) ? path : "");
  if (layout == nullptr) {
    std::vector<std::string> known;
    for (const Layout& l : layouts()) known.push_back(fmt::format("{} ({}{})", l.name, fmt::join(l.files, " + "), l.where));
    fail_input("{}: no SAE layout recognised (layouts: {})", dir, fmt::join(known, "; "));
  }
  SparseAutoencoder sae = layout->read(dir);
  if (sae.d_out == 0) {  // an SAE: it reconstructs what it reads
    sae.d_out = sae.d_in;
    sae.output_site = sae.site;
  }
  sae.check(dir);
  sae.fingerprint = sae.weights_fingerprint();
  sae.layout = layout->name;
  sae.path = dir;
  sae.name = name.empty() ? folder_name(dir) : name;
  return sae;
}

}  // namespace probekit::sae
