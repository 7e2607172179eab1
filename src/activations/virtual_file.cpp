#include "activations/activation_store.h"

#include <fmt/format.h>

#include <functional>

#include "activations/file_format.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/sha256.h"

namespace probekit::activations {

using format::kCompleteAttribute;
using format::write_attributes;
using format::write_int_dataset;

namespace {

// A dataset of `dims` made of each shard's dataset `name` of this group, one after the other.
void create_joined_dataset(hid_t group, const std::string& name, hid_t type, std::vector<hsize_t> dims,
                           const std::vector<hdf5::VirtualSource>& sources) {
  dims[0] = 0;
  for (const hdf5::VirtualSource& source : sources) dims[0] += source.rows;
  if (dims[0] == 0) {
    hdf5::create_dataset(group, name, type, dims, {});
  } else {
    hdf5::create_virtual_dataset(group, name, type, dims, sources);
  }
}

void write_virtual_group(hid_t file, Split split, const FileAttributes& attributes, const std::vector<ShardRows>& shards,
                         const std::vector<std::string>& shard_names, const SplitLayout& merged) {
  hdf5::Handle group = hdf5::create_group(file, split_name(split));
  const auto s = static_cast<size_t>(split);
  auto sources = [&](const std::string& dataset, const std::function<int64_t(const SplitLayout&)>& rows_of) {
    std::vector<hdf5::VirtualSource> pieces;
    hsize_t row = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      auto rows = static_cast<hsize_t>(rows_of(shards[i].layouts[s]));
      pieces.push_back({shard_names[i], std::string(split_name(split)) + "/" + dataset, row, rows});
      row += rows;
    }
    return pieces;
  };
  auto rows = [](const SplitLayout& layout) { return layout.rows(); };
  auto examples = [](const SplitLayout& layout) { return layout.examples(); };
  for (const RowDataset& dataset : row_datasets(attributes)) {
    create_joined_dataset(group.get(), dataset.name, dataset.file_type(), dataset.dims(0), sources(dataset.name, rows));
  }
  create_joined_dataset(group.get(), "labels", H5T_STD_I64LE, {0}, sources("labels", examples));
  create_joined_dataset(group.get(), "example_index", H5T_STD_I64LE, {0}, sources("example_index", examples));
  if (!merged.offsets.empty()) {
    // Each shard's offsets count from its own first token: rebased, so stored.
    write_int_dataset(group.get(), "offsets", merged.offsets, false);
    create_joined_dataset(group.get(), "token_ids", H5T_STD_I64LE, {0}, sources("token_ids", rows));
    for (const auto& [name, values] : {std::pair{"positions", &merged.positions}, std::pair{"token_labels", &merged.token_labels}}) {
      if (!values->empty()) create_joined_dataset(group.get(), name, H5T_STD_I64LE, {0}, sources(name, rows));
    }
  }
  if (!merged.metadata.empty()) {
    hdf5::Handle metadata = hdf5::create_group(group.get(), "metadata");
    for (const auto& [field, values] : merged.metadata) hdf5::write_string_dataset(metadata.get(), field, values);
  }
}

template <typename T>
void hash_values(Sha256& hash, const std::vector<T>& values) {
  hash.update(std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}

// What a virtual file records of one source, to know it again: its rows and examples per split, its capture's
// dataset hash, seed and model fingerprint, and a hash of its labels and example indices (a shard captured again
// with another seed has the same shapes and other rows).
Json source_record(const std::string& source) {
  const FileAttributes attributes = read_attributes(source);
  const std::array<SplitLayout, 3> layouts = read_layouts(source);
  Sha256 hash;
  Json rows = Json::array(), examples = Json::array();
  for (const SplitLayout& layout : layouts) {
    rows.push_back(layout.rows());
    examples.push_back(layout.examples());
    hash_values(hash, layout.labels);
    hash_values(hash, layout.example_index);
  }
  return {{"rows", rows},
          {"examples", examples},
          {"dataset_sha256", attributes.dataset_sha256},
          {"seed", attributes.seed},
          {"model_fingerprint", attributes.recipe.model_fingerprint},
          {"labels_and_indices_sha256", hash.hex_digest()}};
}

}  // namespace

namespace format {

void check_virtual_sources(hid_t file, const std::string& path) {
  auto names = hdf5::get_string_list_attribute(file, "virtual_sources");
  auto records = hdf5::get_string_list_attribute(file, kVirtualRecordsAttribute);
  if (!names || !records) return;  // not virtual, or merged before sources were recorded
  if (names->size() != records->size()) fail("{}: {} virtual sources but {} records of them", path, names->size(), records->size());
  const std::string directory = parent_directory(path).empty() ? "." : parent_directory(path);
  for (size_t i = 0; i < names->size(); ++i) {
    const std::string source = directory + "/" + (*names)[i];
    if (!is_regular_file(source)) {
      fail("{}: its rows are read from {}, which is missing; put it back, or merge the shards again", path, source);
    }
    const Json was = parse_json((*records)[i], path + ": " + kVirtualRecordsAttribute);
    const Json now = source_record(source);
    // The settings first, which say what happened; the hash last, which catches the rest.
    for (const char* key : {"seed", "dataset_sha256", "model_fingerprint", "rows", "examples", "labels_and_indices_sha256"}) {
      if (was.contains(key) && now.value(key, Json()) != was.at(key)) {
        fail("{}: the shard file {} it maps changed since the merge ({} was {}, is now {}): the merged file would pair "
             "its new rows with the old ones' labels; merge the shards again",
             path, source, key, was.at(key).dump(), now.value(key, Json()).dump());
      }
    }
  }
}

}  // namespace format

void write_virtual_file(const std::string& path, const FileAttributes& attributes, const std::vector<ShardRows>& shards,
                        const std::array<SplitLayout, 3>& merged) {
  std::string directory = absolute_path(parent_directory(path).empty() ? "." : parent_directory(path));
  std::vector<std::string> shard_names;
  for (const ShardRows& shard : shards) shard_names.push_back(relative_path(directory, absolute_path(shard.path)));
  std::string temporary = path + ".tmp";
  try {
    hdf5::Handle file = hdf5::create_file(temporary);
    write_attributes(file.get(), attributes);
    hdf5::set_attribute(file.get(), "compression", std::string("none"));
    hdf5::set_attribute(file.get(), "virtual_sources", shard_names);
    std::vector<std::string> records;
    for (const ShardRows& shard : shards) records.push_back(dump_json(source_record(shard.path)));
    hdf5::set_attribute(file.get(), format::kVirtualRecordsAttribute, records);
    for (Split split : kSplits) {
      write_virtual_group(file.get(), split, attributes, shards, shard_names, merged[static_cast<size_t>(split)]);
    }
    hdf5::set_attribute(file.get(), kCompleteAttribute, int64_t{1});
    hdf5::flush(file.get());
  } catch (const std::exception&) {
    std::remove(temporary.c_str());
    rethrow_with_context(path + ": writing the virtual file");
  }
  rename_path(temporary, path);
}

}  // namespace probekit::activations

