#include "capture/merge.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/files.h"
#include "activations/activation_store.h"

namespace probekit::capture {

namespace {

using activations::Split;

struct ShardFile {
  int64_t index = 0, count = 0;
  std::string path;
  activations::FileAttributes attributes;
};

ShardFile read_shard(const std::string& path) {
  if (!is_regular_file(path)) {
    if (is_regular_file(activations::partial_path_for(path))) {
      fail_input("{} is incomplete: its capture was interrupted ({} is there); finish that shard with "
                 "capture_activations --resume and the same --shard",
                 path, activations::partial_path_for(path));
    }
    fail_input("{} is missing (is that shard's capture finished? an interrupted one leaves a .partial file)", path);
  }
  ShardFile shard;
  shard.path = path;
  shard.attributes = activations::read_attributes(path);
  long long index = 0, count = 0;
  if (std::sscanf(shard.attributes.shard.c_str(), "%lld/%lld", &index, &count) != 2 || count < 1 || index < 0 ||
      index >= count) {
    fail_input("{} is not a shard of a capture run (no shard attribute I/N)", path);
  }
  shard.index = index;
  shard.count = count;
  return shard;
}

// The files of layer file `name` in every shard directory, sorted by shard, checked to be all N shards of one run.
std::vector<ShardFile> read_shards(const std::vector<std::string>& shard_dirs, const std::string& name) {
  std::vector<ShardFile> shards;
  for (const std::string& dir : shard_dirs) shards.push_back(read_shard(dir + "/" + name));
  std::sort(shards.begin(), shards.end(), [](const ShardFile& a, const ShardFile& b) { return a.index < b.index; });
  const int64_t count = shards.front().count;
  std::vector<int64_t> missing;
  size_t next = 0;
  for (int64_t index = 0; index < count; ++index) {
    if (next < shards.size() && shards[next].index == index) {
      ++next;
      if (next < shards.size() && shards[next].index == index) {
        fail_input("{} and {} are both shard {}/{} (every shard 0..N-1 is needed once)", shards[next - 1].path,
                   shards[next].path, index, count);
      }
    } else {
      missing.push_back(index);
    }
  }
  for (const ShardFile& shard : shards) {
    if (shard.count != count) {
      fail_input("{} is shard {}/{} but {} is shard {}/{}: shards of different runs", shard.path, shard.index, shard.count,
                 shards.front().path, shards.front().index, count);
    }
    activations::FileAttributes a = shard.attributes, b = shards.front().attributes;
    a.shard = b.shard = "";
    if (a.identity() != b.identity()) fail_input("{} and {} come from different capture runs", shard.path, shards.front().path);
  }
  if (!missing.empty()) {
    fail_input("{}: shard{} {} of {} missing (every shard 0..N-1 is needed once): run {} or give {} directory",
               name, missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), count, missing.size() > 1 ? "them" : "it",
               missing.size() > 1 ? "their" : "its");
  }
  return shards;
}

// The layers whose files, complete or interrupted (.partial), are in any of the shard directories.
std::set<int64_t> layers_named_in(const std::vector<std::string>& shard_dirs) {
  const std::string partial_suffix = activations::partial_path_for("");
  std::set<int64_t> layers;
  for (const std::string& dir : shard_dirs) {
    if (!is_directory(dir)) continue;  // read_shard names its files missing
    for (std::string name : list_directory(dir)) {
      const size_t stem = name.size() - std::min(name.size(), partial_suffix.size());
      if (name.compare(stem, std::string::npos, partial_suffix) == 0) name.erase(stem);
      const int64_t layer = activations::layer_from_file_name(name);
      if (layer >= 0) layers.insert(layer);
    }
  }
  return layers;
}

// One layer file of the run: its name and its file in every shard, sorted by shard.
struct LayerShards {
  std::string name;
  std::vector<ShardFile> shards;
};

// Every layer file of the run, each checked complete in every shard: the layers named in any shard directory and those
// the files' `layers` attribute lists. A layer one shard lacks (its file deleted, or left .partial by a kill between
// two layers' finish()) is an error naming it, never a layer left out of the merge.
std::vector<LayerShards> read_run_layers(const std::vector<std::string>& shard_dirs) {
  const std::set<int64_t> named = layers_named_in(shard_dirs);
  if (named.empty()) {
    fail_input("{}: no layer_{{L}}_activations.h5 files in the shard directories", fmt::join(shard_dirs, ", "));
  }
  std::vector<LayerShards> layers;
  for (int64_t layer : named) {
    const std::string name = activations::layer_file_name(layer);
    layers.push_back({name, read_shards(shard_dirs, name)});
  }
  const ShardFile run = layers.front().shards.front();
  for (int64_t layer : run.attributes.layers) {
    if (named.count(layer) == 0) {
      fail_input("{}/{} is missing: the run captured layers {} (its files' layers attribute), and no shard directory "
                 "holds layer {}'s file",
                 shard_dirs.front(), activations::layer_file_name(layer), fmt::join(run.attributes.layers, ", "), layer);
    }
  }
  for (const LayerShards& layer : layers) {
    activations::FileAttributes attributes = layer.shards.front().attributes;
    attributes.layer = run.attributes.layer;
    if (attributes.identity() != run.attributes.identity()) {
      fail_input("{} and {} come from different capture runs", layer.shards.front().path, run.path);
    }
  }
  return layers;
}

// Shards are consecutive ranges of the run's order (train, then val, then test), so each split is its shards'
// rows one after the other; per-token offsets are rebased onto the rows before them.
std::array<activations::SplitLayout, 3> join_layouts(const std::vector<activations::ShardRows>& parts, bool per_token) {
  std::array<activations::SplitLayout, 3> merged;
  for (Split split : activations::kSplits) {
    auto& target = merged[static_cast<size_t>(split)];
    if (per_token) target.offsets.push_back(0);
    for (const auto& part : parts) {
      const auto& piece = part.layouts[static_cast<size_t>(split)];
      target.labels.insert(target.labels.end(), piece.labels.begin(), piece.labels.end());
      target.example_index.insert(target.example_index.end(), piece.example_index.begin(), piece.example_index.end());
      target.token_ids.insert(target.token_ids.end(), piece.token_ids.begin(), piece.token_ids.end());
      target.positions.insert(target.positions.end(), piece.positions.begin(), piece.positions.end());
      target.token_labels.insert(target.token_labels.end(), piece.token_labels.begin(), piece.token_labels.end());
      for (size_t i = 1; i < piece.offsets.size(); ++i) {
        target.offsets.push_back(target.offsets.back() + piece.offsets[i] - piece.offsets[i - 1]);
      }
      for (const auto& [field, values] : piece.metadata) {
        auto& column = target.metadata[field];
        column.insert(column.end(), values.begin(), values.end());
      }
    }
  }
  return merged;
}

// Copies every shard's rows into one new file.
void write_copy(const std::string& path, const activations::FileAttributes& attributes,
                const std::vector<activations::ShardRows>& parts, const std::array<activations::SplitLayout, 3>& merged,
                bool gzip) {
  activations::ActivationWriter writer = activations::ActivationWriter::create(path, attributes, merged, gzip);
  const int64_t width = attributes.row_width();
  constexpr int64_t kBlockRows = 4096;
  std::vector<float> block;
  int64_t examples = 0;
  for (Split split : activations::kSplits) {
    int64_t row = 0;
    for (const activations::ShardRows& part : parts) {
      int64_t rows = part.layouts[static_cast<size_t>(split)].rows();
      for (int64_t at = 0; at < rows; at += kBlockRows) {
        int64_t count = std::min(kBlockRows, rows - at);
        block.resize(static_cast<size_t>(count * width));
        activations::read_activation_rows(part.path, split, at, count, block.data());
        writer.write_rows(split, row + at, count, block.data());
      }
      row += rows;
    }
    examples += merged[static_cast<size_t>(split)].examples();
  }
  writer.commit(examples);
  writer.finish();
}

// The absolute, symlink-free form of a path that may not exist yet: its deepest existing ancestor resolved.
std::string resolved_path(const std::string& path) {
  if (path_exists(path)) return absolute_path(path);
  std::string parent = parent_directory(path);
  std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::string base = resolved_path(parent.empty() ? "." : parent);
  return name.empty() || name == "." ? base : base + "/" + name;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first {}, second {};
  return ::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0 && first.st_dev == second.st_dev &&
         first.st_ino == second.st_ino;
}

// Refuses, --overwrite or not, an output directory that is a shard directory or lies inside one, and a merged
// file that is (through a link) one of the files it reads: writing it would replace a shard's rows with a file
// mapping or copying itself. An output directory holding the shard directories is the default layout.
void check_output_apart(const std::vector<std::string>& shard_dirs, const std::string& output_dir) {
  const std::string output = resolved_path(output_dir);
  for (const std::string& dir : shard_dirs) {
    const std::string shard = resolved_path(dir);
    if (output == shard || output.rfind(shard + "/", 0) == 0) {
      fail_usage("--output-dir {} {} the shard directory {} it merges: the merged files would replace or sit among "
                 "that shard's own; choose an --output-dir outside every shard (their parent, by default)",
                 output_dir, output == shard ? "is" : "lies inside", dir);
    }
    if (!is_directory(output_dir)) continue;
    // Every entry, not only the complete layer files: the shards' own checks come later and name what is wrong.
    for (const std::string& name : list_directory(dir)) {
      const std::string file = dir + "/" + name;
      if (same_file(output_dir + "/" + name, file)) {
        fail_usage("{}/{} is the shard file {} (a link): merging into it would replace that shard's rows; choose "
                   "another --output-dir",
                   output_dir, name, file);
      }
    }
  }
}

}  // namespace

std::vector<std::string> find_shard_dirs(const std::string& dir) {
  static const std::regex shard_name(R"(shard_(\d{1,9})_of_(\d{1,9}))");  // more digits: no shard's
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : list_directory(dir)) {
    std::smatch match;
    if (std::regex_match(name, match, shard_name) && is_directory(dir + "/" + name)) {
      found.emplace_back(std::stoll(match[1].str()), dir + "/" + name);
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> dirs;
  for (auto& [index, path] : found) dirs.push_back(path);
  if (dirs.empty()) fail_input("{}: no shard_I_of_N directories to merge", dir);
  return dirs;
}

std::vector<std::string> merge_shards(const std::vector<std::string>& shard_dirs, const std::string& output_dir,
                                      const MergeOptions& options) {
  if (shard_dirs.empty()) fail_input("nothing to merge: no shard directories");
  if (options.virtual_files && options.gzip) fail_usage("--virtual and --compression gzip exclude each other: virtual files copy nothing to compress");
  check_output_apart(shard_dirs, output_dir);
  const std::vector<LayerShards> layers = read_run_layers(shard_dirs);
  // Every output is checked before any is written: a refusal leaves the output directory as it was.
  for (const LayerShards& layer : layers) {
    const std::string path = output_dir + "/" + layer.name;
    if (is_regular_file(path) && !options.overwrite) fail("{} already exists; pass --overwrite to replace it", path);
  }
  make_directories(output_dir);
  std::vector<std::string> written;
  for (const LayerShards& layer : layers) {
    const std::vector<ShardFile>& shards = layer.shards;
    std::vector<activations::ShardRows> parts;
    for (const ShardFile& shard : shards) parts.push_back({shard.path, activations::read_layouts(shard.path)});
    std::array<activations::SplitLayout, 3> merged = join_layouts(parts, shards.front().attributes.recipe.position == Position::kAll);
    std::string path = output_dir + "/" + layer.name;
    activations::FileAttributes attributes = shards.front().attributes;
    attributes.shard = "";
    if (options.virtual_files) {
      activations::write_virtual_file(path, attributes, parts, merged);
    } else {
      write_copy(path, attributes, parts, merged, options.gzip);
    }
    written.push_back(path);
  }
  return written;
}

}  // namespace probekit::capture
