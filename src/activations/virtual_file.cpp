#include "activations/activation_store.h"

#include <fmt/format.h>

#include <functional>

#include "activations/file_format.h"
#include "common/error.h"
#include "common/files.h"

namespace probekit::activations {

using format::kCompleteAttribute;
using format::kRowDatasets;
using format::RowDataset;
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
  for (const RowDataset& dataset : kRowDatasets) {
    if ((std::string(dataset.name) == "activations") == attributes.holds_expert_choices()) continue;
    create_joined_dataset(group.get(), dataset.name, dataset.file_type(), {0, static_cast<hsize_t>(attributes.hidden_size)},
                          sources(dataset.name, rows));
  }
  create_joined_dataset(group.get(), "labels", H5T_STD_I64LE, {0}, sources("labels", examples));
  create_joined_dataset(group.get(), "example_index", H5T_STD_I64LE, {0}, sources("example_index", examples));
  if (!merged.offsets.empty()) {
    // Each shard's offsets count from its own first token: rebased, so stored.
    write_int_dataset(group.get(), "offsets", merged.offsets, false);
    create_joined_dataset(group.get(), "token_ids", H5T_STD_I64LE, {0}, sources("token_ids", rows));
  }
  if (!merged.metadata.empty()) {
    hdf5::Handle metadata = hdf5::create_group(group.get(), "metadata");
    for (const auto& [field, values] : merged.metadata) hdf5::write_string_dataset(metadata.get(), field, values);
  }
}

}  // namespace

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

