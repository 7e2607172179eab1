#include "activations/file_format.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/utf8_text.h"

namespace probekit::activations::format {

namespace {

constexpr int64_t kChunkBytes = 1 << 20;

}  // namespace

std::vector<hsize_t> row_chunk(int64_t rows, int64_t width) {
  int64_t per_chunk = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, width * 4));
  auto chunk_rows = static_cast<hsize_t>(std::max<int64_t>(1, std::min(rows, per_chunk)));
  if (width <= 0) return {chunk_rows};
  return {chunk_rows, static_cast<hsize_t>(width)};
}

void write_int_dataset(hid_t group, const std::string& name, const std::vector<int64_t>& values, bool gzip) {
  hdf5::Handle dataset = hdf5::create_dataset(group, name, H5T_STD_I64LE, {values.size()},
                                              {row_chunk(static_cast<int64_t>(values.size()), 0), gzip, false});
  hdf5::write_rows(dataset.get(), H5T_NATIVE_INT64, 0, values.size(), values.data());
}

std::vector<int64_t> read_int_dataset(hid_t group, const std::string& name, const std::string& where) {
  auto dataset = hdf5::open_dataset(group, name);
  if (!dataset) fail("{}: missing dataset '{}'", where, name);
  std::vector<hsize_t> dims = hdf5::dataset_dims(dataset->get());
  if (dims.size() != 1) fail("{}/{}: expected a 1-D dataset, found {} dimensions", where, name, dims.size());
  std::vector<int64_t> values(hdf5::stored_element_count(dataset->get(), where + "/" + name));
  hdf5::Handle type(H5Dget_type(dataset->get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    // HDF5 would convert floats to integers silently (1.7 -> 1): an index must be stored as one.
    std::vector<double> stored(values.size());
    hdf5::read_rows(dataset->get(), H5T_NATIVE_DOUBLE, 0, dims[0], stored.data());
    size_t row = 0;
    while (row + 1 < stored.size() && stored[row] == std::floor(stored[row])) ++row;
    fail_input("{}/{}: row {} holds {}, stored as a floating-point number; {} must be integers", where, name, row,
               stored.empty() ? 0.0 : stored[row], name);
  }
  hdf5::read_rows(dataset->get(), H5T_NATIVE_INT64, 0, dims[0], values.data());
  return values;
}

namespace {

// The plain text and integer attributes beside the recipe; one absent from a file keeps FileAttributes' default.
const std::vector<std::pair<const char*, std::string FileAttributes::*>>& text_attributes() {
  static const std::vector<std::pair<const char*, std::string FileAttributes::*>> fields = {
      {"dataset", &FileAttributes::dataset},           {"dataset_sha256", &FileAttributes::dataset_sha256},
      {"tool_version", &FileAttributes::tool_version}, {"split", &FileAttributes::split_ratios},
      {"text_field", &FileAttributes::text_field},     {"label_field", &FileAttributes::label_field},
      {"batching", &FileAttributes::batching}};
  return fields;
}

const std::vector<std::pair<const char*, int64_t FileAttributes::*>>& integer_attributes() {
  static const std::vector<std::pair<const char*, int64_t FileAttributes::*>> fields = {
      {"hidden_size", &FileAttributes::hidden_size}, {"seed", &FileAttributes::seed},
      {"max_examples", &FileAttributes::max_examples}};
  return fields;
}

}  // namespace

void write_attributes(hid_t file, const FileAttributes& a) {
  a.recipe.write_attributes(file);
  for (const auto& [name, member] : text_attributes()) hdf5::set_attribute(file, name, a.*member);
  for (const auto& [name, member] : integer_attributes()) hdf5::set_attribute(file, name, a.*member);
  hdf5::set_attribute(file, "layers", a.layers);
  hdf5::set_attribute(file, "layer", a.layer);
  hdf5::set_attribute(file, "label_names", a.label_names);
  if (!a.keep_fields.empty()) hdf5::set_attribute(file, "keep_fields", a.keep_fields);
  hdf5::set_attribute(file, "skip_invalid", static_cast<int64_t>(a.skip_invalid));
  if (!a.shard.empty()) hdf5::set_attribute(file, "shard", a.shard);
}

namespace {

// A layer read from the file: numbered from 0, as the model's layers are.
void check_layer_attribute(const char* name, int64_t layer) {
  if (layer < 0) fail("attribute '{}': layer {} is out of range (layers are numbered from 0)", name, layer);
}

// Every attribute but the recipe's; errors name the attribute, load_attributes adds the file.
void read_attribute_values(hid_t file, const std::string& path, FileAttributes& a) {
  for (const auto& [name, member] : text_attributes()) {
    if (std::optional<std::string> value = hdf5::get_string_attribute(file, name)) a.*member = *value;
  }
  for (const auto& [name, member] : integer_attributes()) {
    if (std::optional<int64_t> value = hdf5::get_int_attribute(file, name)) a.*member = *value;
  }
  a.layers = hdf5::get_int_list_attribute(file, "layers").value_or(std::vector<int64_t>{});
  for (int64_t layer : a.layers) check_layer_attribute("layers", layer);
  const std::optional<int64_t> layer = hdf5::get_int_attribute(file, "layer");
  if (layer) check_layer_attribute("layer", *layer);
  a.layer = layer.value_or(layer_from_file_name(path));
  a.label_names = hdf5::get_string_list_attribute(file, "label_names").value_or(std::vector<std::string>{});
  // Labels name probes in JSON and in probe files' headers, which hold only UTF-8.
  for (size_t i = 0; i < a.label_names.size(); ++i) {
    if (!is_valid_utf8(a.label_names[i])) {
      fail("label_names[{}] ({}) is not UTF-8 text: labels name probes in JSON files, which hold only UTF-8", i,
           dump_json(Json(a.label_names[i])));
    }
  }
  // Two labels of one name would write one probe file over the other, or drop a probe.
  for (size_t i = 0; i < a.label_names.size(); ++i) {
    for (size_t j = i + 1; j < a.label_names.size(); ++j) {
      if (a.label_names[i] == a.label_names[j]) {
        fail("label_names holds '{}' twice (labels {} and {}); every label needs a name of its own", a.label_names[i],
             i, j);
      }
    }
  }
  a.keep_fields = hdf5::get_string_list_attribute(file, "keep_fields").value_or(std::vector<std::string>{});
  a.skip_invalid = hdf5::get_int_attribute(file, "skip_invalid").value_or(0) != 0;
  a.shard = hdf5::get_string_attribute(file, "shard").value_or("");
}

}  // namespace

FileAttributes load_attributes(hid_t file, const std::string& path) {
  FileAttributes a;
  a.recipe = ReadoutRecipe::read_attributes(file, path);
  try {
    read_attribute_values(file, path, a);
  } catch (const std::exception&) {
    rethrow_with_context(path);  // the HDF5 layer knows the attribute, not the file
  }
  return a;
}

void check_complete(hid_t file, const std::string& path) {
  auto complete = hdf5::get_int_attribute(file, kCompleteAttribute);
  if (complete && *complete != 1) {
    fail("{}: the file is incomplete (its capture was interrupted); finish it with capture_activations --resume", path);
  }
  check_virtual_sources(file, path);
}

}  // namespace probekit::activations::format
