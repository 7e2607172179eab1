#include "activations/activation_store.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <regex>

#include "common/error.h"

namespace probekit::activations {

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kVal: return "val";
    case Split::kTest: return "test";
  }
  return "?";
}

std::vector<std::string> FileAttributes::identity() const {
  std::vector<std::string> lines = recipe.identity();
  lines.insert(lines.end(), {"layers=" + fmt::format("{}", fmt::join(layers, ",")),
                             "layer=" + std::to_string(layer),
                             "label_names=" + fmt::format("{}", fmt::join(label_names, ",")),
                             "hidden_size=" + std::to_string(hidden_size),
                             "dataset_sha256=" + dataset_sha256,
                             "split=" + split_ratios,
                             "seed=" + std::to_string(seed),
                             "max_examples=" + std::to_string(max_examples),
                             "text_field=" + text_field,
                             "label_field=" + label_field,
                             "keep_fields=" + fmt::format("{}", fmt::join(keep_fields, ",")),
                             "skip_invalid=" + std::to_string(static_cast<int>(skip_invalid)),
                             "shard=" + shard});
  return lines;
}

std::vector<hsize_t> RowDataset::dims(int64_t rows) const {
  if (width == 0) return {static_cast<hsize_t>(rows)};
  return {static_cast<hsize_t>(rows), static_cast<hsize_t>(width)};
}

std::vector<RowDataset> row_datasets(const FileAttributes& attributes) {
  const int64_t k = attributes.hidden_size;
  if (attributes.holds_expert_choices()) return {{"expert_ids", true, k, 0}, {"expert_weights", false, k, k}};
  if (attributes.holds_sparse_latents()) {
    const int64_t top = attributes.recipe.sae->top_k;
    return {{"latent_indices", true, top, 0}, {"latent_values", false, top, top}, {"l0", true, 0, 2 * top},
            {"relative_error", false, 0, 2 * top + 1}};
  }
  return {{"activations", false, k, 0}};
}

int64_t FileAttributes::row_width() const {
  if (holds_expert_choices()) return 2 * hidden_size;
  return holds_sparse_latents() ? sparse_latent_row_width(recipe.sae->top_k) : hidden_size;
}

std::string FileAttributes::identity_difference(const FileAttributes& made) const {
  std::vector<std::string> want = identity(), have = made.identity();
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != have[i]) return fmt::format("was made with {} but this run has {}", have[i], want[i]);
  }
  return "";
}

std::string layer_file_name(int64_t layer) { return fmt::format("layer_{}_activations.h5", layer); }

int64_t layer_from_file_name(const std::string& path) {
  static const std::regex pattern(R"(layer_(\d{1,9})_activations\.h5$)");  // more digits: no layer's
  std::smatch match;
  if (std::regex_search(path, match, pattern)) return std::stoll(match[1].str());
  return -1;
}

std::vector<std::string> find_activation_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    struct stat st {};
    if (::stat(input.c_str(), &st) != 0) fail_input("{}: no such file or directory", input);
    if (S_ISDIR(st.st_mode)) {
      DIR* dir = ::opendir(input.c_str());
      if (dir == nullptr) fail("cannot list directory {}", input);
      std::vector<std::string> found;
      while (dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (layer_from_file_name(name) >= 0) found.push_back(input + "/" + name);
      }
      ::closedir(dir);
      if (found.empty()) fail_input("{}: no layer_{{L}}_activations.h5 files in this directory", input);
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(input);
    }
  }
  std::stable_sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return layer_from_file_name(a) < layer_from_file_name(b);
  });
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}



}  // namespace probekit::activations
