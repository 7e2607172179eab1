#include "activations/activation_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "activations/file_format.h"
#include "common/error.h"
#include "data/reference_labels.h"

namespace probekit::activations {

namespace {

using format::check_complete;
using format::load_attributes;
using format::read_int_dataset;

void check_finite(const SplitData& data, const std::string& where) {
  for (size_t i = 0; i < data.activations.size(); ++i) {
    if (!std::isfinite(data.activations[i])) {
      fail("{}: activation at row {}, column {} is {} (NaN/Inf activations cannot be trained on; re-capture, e.g. "
           "with --dtype fp32)",
           where, static_cast<int64_t>(i) / data.hidden, static_cast<int64_t>(i) % data.hidden, data.activations[i]);
    }
  }
}

// Everything of a group but its activations.
SplitLayout read_split_layout(hid_t group, const std::string& where) {
  SplitLayout layout;
  layout.labels = read_int_dataset(group, "labels", where);
  if (hdf5::exists(group, "example_index")) layout.example_index = read_int_dataset(group, "example_index", where);
  if (hdf5::exists(group, "offsets")) {
    layout.offsets = read_int_dataset(group, "offsets", where);
    layout.token_ids = read_int_dataset(group, "token_ids", where);
    if (hdf5::exists(group, "positions")) layout.positions = read_int_dataset(group, "positions", where);
    if (hdf5::exists(group, "token_labels")) layout.token_labels = read_int_dataset(group, "token_labels", where);
  }
  if (auto metadata = hdf5::open_group(group, "metadata")) {
    for (const std::string& name : hdf5::member_names(metadata->get())) {
      auto column = hdf5::open_dataset(metadata->get(), name);
      if (column) layout.metadata[name] = hdf5::read_string_dataset(column->get());
    }
  }
  return layout;
}

template <typename T>
hid_t memory_type() {
  return std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
}

// A group's dataset of rows [N, width], setting data.rows and data.hidden (every such dataset of a group must
// agree on them).
template <typename T>
std::vector<T> read_rows_dataset(hid_t group, const char* name, const std::string& where, SplitData& data) {
  auto dataset = hdf5::open_dataset(group, name);
  if (!dataset) fail("{}: missing dataset '{}'", where, name);
  std::vector<hsize_t> dims = hdf5::dataset_dims(dataset->get());
  if (dims.size() != 2) fail("{}/{}: expected 2 dimensions [N, width], found {}", where, name, dims.size());
  const auto rows = static_cast<int64_t>(dims[0]), width = static_cast<int64_t>(dims[1]);
  if (data.hidden > 0 && (rows != data.rows || width != data.hidden)) {
    fail("{}/{}: [{}, {}] rows, but the group's other dataset has [{}, {}]", where, name, rows, width, data.rows,
         data.hidden);
  }
  data.rows = rows;
  data.hidden = width;
  std::vector<T> values(hdf5::stored_element_count(dataset->get(), where + "/" + name));
  hdf5::read_rows(dataset->get(), memory_type<T>(), 0, dims[0], values.data());
  return values;
}

// A 1-D dataset of one value per row [rows].
template <typename T>
std::vector<T> read_row_values(hid_t group, const char* name, const std::string& where, int64_t rows) {
  auto dataset = hdf5::open_dataset(group, name);
  if (!dataset) fail("{}: missing dataset '{}'", where, name);
  const std::vector<hsize_t> dims = hdf5::dataset_dims(dataset->get());
  if (dims.size() != 1 || static_cast<int64_t>(dims[0]) != rows) {
    fail("{}/{}: expected [{}], one value per row", where, name, rows);
  }
  std::vector<T> values(static_cast<size_t>(rows));
  hdf5::read_rows(dataset->get(), memory_type<T>(), 0, dims[0], values.data());
  return values;
}

// An SAE's sparse latents: each row's top K (index -1 past its L0), densified into `activations` [rows, d_sae].
void read_sparse_latents(hid_t group, const std::string& where, const FileAttributes& attributes, SplitData& data) {
  data.latent_indices = read_rows_dataset<int32_t>(group, "latent_indices", where, data);
  data.latent_values = read_rows_dataset<float>(group, "latent_values", where, data);
  data.top_k = data.hidden;
  data.l0 = read_row_values<int32_t>(group, "l0", where, data.rows);
  data.relative_error = read_row_values<float>(group, "relative_error", where, data.rows);
  const int64_t width = attributes.hidden_size;
  data.hidden = width;
  data.activations.assign(static_cast<size_t>(data.rows * width), 0.0f);
  for (int64_t r = 0; r < data.rows; ++r) {
    for (int64_t j = 0; j < data.top_k; ++j) {
      const auto at = static_cast<size_t>(r * data.top_k + j);
      const int32_t index = data.latent_indices[at];
      if (index == -1) continue;
      if (index < 0 || index >= width) {
        fail("{}/latent_indices: index {} at row {} is outside the SAE's {} latents", where, index, r, width);
      }
      data.activations[static_cast<size_t>(r * width + index)] = data.latent_values[at];
    }
  }
}

hdf5::Handle open_split(hid_t file, Split split, const std::string& path) {
  auto group = hdf5::open_group(file, split_name(split));
  if (!group) fail("{}: missing group '{}' (expected groups train, val and test)", path, split_name(split));
  return std::move(*group);
}

SplitData read_split(hid_t file, Split split, const FileAttributes& attributes, const std::string& path) {
  std::string where = fmt::format("{}: group '{}'", path, split_name(split));
  hdf5::Handle group = open_split(file, split, path);
  SplitData data;
  if (attributes.holds_expert_choices()) {
    data.expert_ids = read_rows_dataset<int32_t>(group.get(), "expert_ids", where, data);
    data.expert_weights = read_rows_dataset<float>(group.get(), "expert_weights", where, data);
    auto negative = std::find_if(data.expert_ids.begin(), data.expert_ids.end(), [](int32_t id) { return id < 0; });
    if (negative != data.expert_ids.end()) {
      fail("{}/expert_ids: negative expert id {} at row {}", where, *negative,
           (negative - data.expert_ids.begin()) / std::max<int64_t>(1, data.hidden));
    }
  } else if (attributes.holds_sparse_latents()) {
    read_sparse_latents(group.get(), where, attributes, data);
  } else {
    data.activations = read_rows_dataset<float>(group.get(), "activations", where, data);
  }
  SplitLayout layout = read_split_layout(group.get(), where);
  data.labels = std::move(layout.labels);
  data.example_index = std::move(layout.example_index);
  data.offsets = std::move(layout.offsets);
  data.token_ids = std::move(layout.token_ids);
  data.positions = std::move(layout.positions);
  data.token_labels = std::move(layout.token_labels);
  data.metadata = std::move(layout.metadata);

  int64_t examples = data.examples();
  if (data.offsets.empty()) {
    if (examples != data.rows) {
      fail("{}: {} activation rows but {} labels (shape mismatch between activations and labels)", where, data.rows,
           examples);
    }
  } else if (static_cast<int64_t>(data.offsets.size()) != examples + 1 || data.offsets.front() != 0 ||
             data.offsets.back() != data.rows || static_cast<int64_t>(data.token_ids.size()) != data.rows) {
    fail("{}: per-token offsets/token_ids do not match {} examples and {} rows", where, examples, data.rows);
  } else if (!data.positions.empty() && static_cast<int64_t>(data.positions.size()) != data.rows) {
    fail("{}: per-token positions hold {} values for {} rows", where, data.positions.size(), data.rows);
  } else if (!data.token_labels.empty() && static_cast<int64_t>(data.token_labels.size()) != data.rows) {
    fail("{}: per-token token_labels hold {} values for {} rows", where, data.token_labels.size(), data.rows);
  } else if (auto drop = std::adjacent_find(data.offsets.begin(), data.offsets.end(), std::greater<>());
             drop != data.offsets.end()) {
    fail("{}: per-token offsets decrease after example {}", where, drop - data.offsets.begin());
  }
  for (const auto& [name, values] : data.metadata) {
    if (static_cast<int64_t>(values.size()) != examples) {
      fail("{}: metadata column '{}' has {} values for {} examples", where, name, values.size(), examples);
    }
  }
  if (!data.example_index.empty() && static_cast<int64_t>(data.example_index.size()) != examples) {
    fail("{}: {} example_index entries but {} labels", where, data.example_index.size(), examples);
  }
  if (attributes.hidden_size > 0 && data.hidden != attributes.hidden_size) {
    fail("{}: activations have {} columns but the file's hidden_size is {}", where, data.hidden, attributes.hidden_size);
  }
  auto label_count = static_cast<int64_t>(attributes.label_names.size());
  for (int64_t i = 0; i < examples; ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= label_count) {
      fail("{}: label {} at row {} is outside the {} label names", where, data.labels[i], i, label_count);
    }
  }
  check_finite(data, where);
  return data;
}

}  // namespace

FileAttributes read_attributes(const std::string& path) {
  hdf5::Handle file = hdf5::open_file(path, false);
  check_complete(file.get(), path);
  return load_attributes(file.get(), path);
}

ActivationFile read_activation_file(const std::string& path) {
  hdf5::Handle file = hdf5::open_file(path, false);
  check_complete(file.get(), path);
  ActivationFile result;
  result.path = path;
  result.attributes = load_attributes(file.get(), path);
  FileAttributes& a = result.attributes;
  if (a.label_names.empty()) {
    // A reference file: its labels index the reference's fixed, sorted action list.
    a.label_names = data::reference_label_names();
    spdlog::warn("{}: no label_names attribute (a reference file?); assuming the reference's 45 cognitive actions", path);
  }
  for (Split split : kSplits) result.split(split) = read_split(file.get(), split, a, path);
  if (a.hidden_size == 0) a.hidden_size = result.split(Split::kTrain).hidden;
  for (Split split : kSplits) {
    if (result.split(split).hidden != a.hidden_size) {
      fail("{}: group '{}' has {} columns, group 'train' has {}", path, split_name(split), result.split(split).hidden,
           a.hidden_size);
    }
  }
  return result;
}

std::array<SplitLayout, 3> read_layouts(const std::string& path) {
  hdf5::Handle file = hdf5::open_file(path, false);
  check_complete(file.get(), path);
  std::array<SplitLayout, 3> layouts;
  for (Split split : kSplits) {
    layouts[static_cast<size_t>(split)] =
        read_split_layout(open_split(file.get(), split, path).get(), fmt::format("{}: group '{}'", path, split_name(split)));
  }
  return layouts;
}

void read_activation_rows(const std::string& path, Split split, int64_t row, int64_t rows, float* out) {
  hdf5::Handle file = hdf5::open_file(path, false);
  hdf5::Handle group = open_split(file.get(), split, path);
  const FileAttributes attributes = load_attributes(file.get(), path);
  const int64_t row_width = attributes.row_width();
  std::vector<uint32_t> columns;  // 4-byte values of either type
  for (const RowDataset& dataset : row_datasets(attributes)) {
    auto opened = hdf5::open_dataset(group.get(), dataset.name);
    if (!opened) fail("{}: missing dataset '{}/{}'", path, split_name(split), dataset.name);
    const int64_t width = dataset.columns();
    if (width == row_width && !dataset.integer) {
      hdf5::read_rows(opened->get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(row), static_cast<hsize_t>(rows), out);
      continue;
    }
    columns.resize(static_cast<size_t>(rows * width));
    hdf5::read_rows(opened->get(), dataset.memory_type(), static_cast<hsize_t>(row), static_cast<hsize_t>(rows),
                    columns.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < width; ++j) {
        const uint32_t bits = columns[static_cast<size_t>(r * width + j)];
        float value;
        if (dataset.integer) {
          int32_t id;
          std::memcpy(&id, &bits, sizeof id);
          value = static_cast<float>(id);
        } else {
          std::memcpy(&value, &bits, sizeof value);
        }
        out[r * row_width + dataset.offset + j] = value;
      }
    }
  }
}

}  // namespace probekit::activations
