#include "activations/activation_store.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <regex>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/files.h"
#include "data/reference_labels.h"

namespace probekit::activations {

namespace {

constexpr const char* kCompleteAttribute = "complete";
constexpr int64_t kChunkBytes = 1 << 20;

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

void write_attributes(hid_t file, const FileAttributes& a) {
  hdf5::set_attribute(file, "model_name", a.model_name);
  if (!a.model_revision.empty()) hdf5::set_attribute(file, "model_revision", a.model_revision);
  hdf5::set_attribute(file, "model_fingerprint", a.model_fingerprint);
  hdf5::set_attribute(file, "layers", a.layers);
  hdf5::set_attribute(file, "layer", a.layer);
  hdf5::set_attribute(file, "label_names", a.label_names);
  hdf5::set_attribute(file, "hidden_size", a.hidden_size);
  hdf5::set_attribute(file, "site", a.site);
  hdf5::set_attribute(file, "position", a.position);
  hdf5::set_attribute(file, "prompt_suffix", a.prompt_suffix);
  hdf5::set_attribute(file, "dtype", a.dtype);
  hdf5::set_attribute(file, "dataset", a.dataset);
  hdf5::set_attribute(file, "dataset_sha256", a.dataset_sha256);
  hdf5::set_attribute(file, "tool_version", a.tool_version);
  hdf5::set_attribute(file, "split", a.split_ratios);
  hdf5::set_attribute(file, "seed", a.seed);
  hdf5::set_attribute(file, "max_length", a.max_length);
  hdf5::set_attribute(file, "max_examples", a.max_examples);
  hdf5::set_attribute(file, "text_field", a.text_field);
  hdf5::set_attribute(file, "label_field", a.label_field);
  if (!a.keep_fields.empty()) hdf5::set_attribute(file, "keep_fields", a.keep_fields);
  hdf5::set_attribute(file, "skip_invalid", static_cast<int64_t>(a.skip_invalid));
  hdf5::set_attribute(file, "batching", a.batching);
  if (!a.shard.empty()) hdf5::set_attribute(file, "shard", a.shard);
}

FileAttributes load_attributes(hid_t file, const std::string& path) {
  FileAttributes a;
  a.model_name = hdf5::get_string_attribute(file, "model_name").value_or("");
  a.model_revision = hdf5::get_string_attribute(file, "model_revision").value_or("");
  a.model_fingerprint = hdf5::get_string_attribute(file, "model_fingerprint").value_or("");
  a.layers = hdf5::get_int_list_attribute(file, "layers").value_or(std::vector<int64_t>{});
  a.layer = hdf5::get_int_attribute(file, "layer").value_or(layer_from_file_name(path));
  a.label_names = hdf5::get_string_list_attribute(file, "label_names").value_or(std::vector<std::string>{});
  a.hidden_size = hdf5::get_int_attribute(file, "hidden_size").value_or(0);
  a.site = hdf5::get_string_attribute(file, "site").value_or(site_name(Site::kResidPost));
  a.position = hdf5::get_string_attribute(file, "position").value_or("last");
  // Reference files predate the attribute and always used the cognitive-action suffix.
  a.prompt_suffix = hdf5::get_string_attribute(file, "prompt_suffix")
                        .value_or("\n\nThe cognitive action being demonstrated here is");
  a.dtype = hdf5::get_string_attribute(file, "dtype").value_or("");
  a.dataset = hdf5::get_string_attribute(file, "dataset").value_or("");
  a.dataset_sha256 = hdf5::get_string_attribute(file, "dataset_sha256").value_or("");
  a.tool_version = hdf5::get_string_attribute(file, "tool_version").value_or("");
  a.split_ratios = hdf5::get_string_attribute(file, "split").value_or("");
  a.seed = hdf5::get_int_attribute(file, "seed").value_or(42);
  a.max_length = hdf5::get_int_attribute(file, "max_length").value_or(0);
  a.max_examples = hdf5::get_int_attribute(file, "max_examples").value_or(0);
  a.text_field = hdf5::get_string_attribute(file, "text_field").value_or("");
  a.label_field = hdf5::get_string_attribute(file, "label_field").value_or("");
  a.keep_fields = hdf5::get_string_list_attribute(file, "keep_fields").value_or(std::vector<std::string>{});
  a.skip_invalid = hdf5::get_int_attribute(file, "skip_invalid").value_or(0) != 0;
  a.batching = hdf5::get_string_attribute(file, "batching").value_or("");
  a.shard = hdf5::get_string_attribute(file, "shard").value_or("");
  return a;
}

void check_complete(hid_t file, const std::string& path) {
  auto complete = hdf5::get_int_attribute(file, kCompleteAttribute);
  if (complete && *complete != 1) {
    fail("{}: the file is incomplete (its capture was interrupted); finish it with capture_activations --resume", path);
  }
}

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
  } else {
    data.activations = read_rows_dataset<float>(group.get(), "activations", where, data);
  }
  SplitLayout layout = read_split_layout(group.get(), where);
  data.labels = std::move(layout.labels);
  data.example_index = std::move(layout.example_index);
  data.offsets = std::move(layout.offsets);
  data.token_ids = std::move(layout.token_ids);
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

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kVal: return "val";
    case Split::kTest: return "test";
  }
  return "?";
}

std::vector<std::string> FileAttributes::identity() const {
  return {"model_name=" + model_name,
          "model_revision=" + model_revision,
          "model_fingerprint=" + model_fingerprint,
          "layers=" + fmt::format("{}", fmt::join(layers, ",")),
          "layer=" + std::to_string(layer),
          "label_names=" + fmt::format("{}", fmt::join(label_names, ",")),
          "hidden_size=" + std::to_string(hidden_size),
          "site=" + site,
          "position=" + position,
          "prompt_suffix=" + prompt_suffix,
          "dtype=" + dtype,
          "dataset_sha256=" + dataset_sha256,
          "split=" + split_ratios,
          "seed=" + std::to_string(seed),
          "max_length=" + std::to_string(max_length),
          "max_examples=" + std::to_string(max_examples),
          "text_field=" + text_field,
          "label_field=" + label_field,
          "keep_fields=" + fmt::format("{}", fmt::join(keep_fields, ",")),
          "skip_invalid=" + std::to_string(static_cast<int>(skip_invalid)),
          "shard=" + shard};
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
  static const std::regex pattern(R"(layer_(\d+)_activations\.h5$)");
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
  auto open = [&](const char* name) {
    auto dataset = hdf5::open_dataset(group.get(), name);
    if (!dataset) fail("{}: missing dataset '{}/{}'", path, split_name(split), name);
    return std::move(*dataset);
  };
  const FileAttributes attributes = load_attributes(file.get(), path);
  if (!attributes.holds_expert_choices()) {
    hdf5::read_rows(open("activations").get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(row), static_cast<hsize_t>(rows), out);
    return;
  }
  const int64_t k = attributes.hidden_size;
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  std::vector<float> weights(static_cast<size_t>(rows * k));
  hdf5::read_rows(open("expert_ids").get(), H5T_NATIVE_INT32, static_cast<hsize_t>(row), static_cast<hsize_t>(rows), ids.data());
  hdf5::read_rows(open("expert_weights").get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(row), static_cast<hsize_t>(rows),
                  weights.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      out[r * 2 * k + j] = static_cast<float>(ids[static_cast<size_t>(r * k + j)]);
      out[r * 2 * k + k + j] = weights[static_cast<size_t>(r * k + j)];
    }
  }
}

std::string partial_path_for(const std::string& final_path) { return final_path + ".partial"; }

namespace {

std::string progress_path_for(const std::string& partial_path) { return partial_path + ".progress"; }

int64_t read_progress(const std::string& partial_path) {
  std::string path = progress_path_for(partial_path);
  if (!is_regular_file(path)) return 0;
  std::string text = read_file(path);
  long long done = 0;
  if (std::sscanf(text.c_str(), "examples_done=%lld", &done) != 1 || done < 0) fail("{}: unreadable progress record", path);
  return done;
}

void copy_int_dataset(hid_t from, hid_t to, const std::string& name) {
  if (auto dataset = hdf5::open_dataset(from, name)) {
    std::vector<hsize_t> dims = hdf5::dataset_dims(dataset->get());
    std::vector<int64_t> values(dims.at(0));
    hdf5::read_rows(dataset->get(), H5T_NATIVE_INT64, 0, dims[0], values.data());
    write_int_dataset(to, name, values, true);
  }
}

// The datasets of rows [N, width] a group may hold: float32, or int32 expert ids.
struct RowDataset {
  const char* name;
  bool integer;

  // HDF5's type ids are only valid once the library has started: looked up when used.
  hid_t file_type() const { return integer ? H5T_STD_I32LE : H5T_IEEE_F32LE; }
  hid_t memory_type() const { return integer ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT; }
};
constexpr RowDataset kRowDatasets[] = {{"activations", false}, {"expert_ids", true}, {"expert_weights", false}};

void copy_rows_compressed(hid_t from, hid_t to, const RowDataset& rows_dataset) {
  auto source = hdf5::open_dataset(from, rows_dataset.name);
  std::vector<hsize_t> dims = hdf5::dataset_dims(source->get());
  hdf5::Handle copy = hdf5::create_dataset(to, rows_dataset.name, rows_dataset.file_type(), dims,
                                           {row_chunk(static_cast<int64_t>(dims[0]), static_cast<int64_t>(dims[1])), true});
  constexpr hsize_t kBlockRows = 4096;
  std::vector<uint32_t> block;  // 4-byte values of either type
  for (hsize_t row = 0; row < dims[0]; row += kBlockRows) {
    hsize_t rows = std::min(kBlockRows, dims[0] - row);
    block.resize(rows * dims[1]);
    hdf5::read_rows(source->get(), rows_dataset.memory_type(), row, rows, block.data());
    hdf5::write_rows(copy.get(), rows_dataset.memory_type(), row, rows, block.data());
  }
}

// Writes a compressed copy of a finished partial file: partial files are never compressed, because writing
// compressed chunks changes the file's metadata and a killed process could leave it unreadable.
void write_compressed_copy(const std::string& source, const std::string& target) {
  hdf5::Handle in = hdf5::open_file(source, false);
  hdf5::Handle out = hdf5::create_file(target);
  write_attributes(out.get(), load_attributes(in.get(), source));
  hdf5::set_attribute(out.get(), kCompleteAttribute, int64_t{1});
  for (Split split : kSplits) {
    auto from = hdf5::open_group(in.get(), split_name(split));
    if (!from) fail("{}: missing group '{}'", source, split_name(split));
    hdf5::Handle to = hdf5::create_group(out.get(), split_name(split));
    for (const RowDataset& rows : kRowDatasets) {
      if (hdf5::exists(from->get(), rows.name)) copy_rows_compressed(from->get(), to.get(), rows);
    }
    for (const char* name : {"labels", "example_index", "offsets", "token_ids"}) copy_int_dataset(from->get(), to.get(), name);
    if (auto metadata = hdf5::open_group(from->get(), "metadata")) {
      hdf5::Handle columns = hdf5::create_group(to.get(), "metadata");
      for (const std::string& name : hdf5::member_names(metadata->get())) {
        if (auto column = hdf5::open_dataset(metadata->get(), name)) {
          hdf5::write_string_dataset(columns.get(), name, hdf5::read_string_dataset(column->get()));
        }
      }
    }
  }
  hdf5::flush(out.get());
}

}  // namespace

ActivationWriter::ActivationWriter(std::string final_path, hdf5::Handle file, const FileAttributes& attributes)
    : final_path_(std::move(final_path)), partial_path_(partial_path_for(final_path_)), file_(std::move(file)),
      hidden_(attributes.hidden_size), expert_choices_(attributes.holds_expert_choices()) {}

ActivationWriter ActivationWriter::create(const std::string& final_path, const FileAttributes& attributes,
                                          const std::array<SplitLayout, 3>& layouts, bool gzip) {
  std::string partial = partial_path_for(final_path);
  std::remove(progress_path_for(partial).c_str());
  try {
    ActivationWriter writer(final_path, hdf5::create_file(partial), attributes);
    hid_t file = writer.file_.get();
    write_attributes(file, attributes);
    hdf5::set_attribute(file, kCompleteAttribute, int64_t{0});
    hdf5::set_attribute(file, "compression", std::string(gzip ? "gzip" : "none"));
    for (Split split : kSplits) {
      const SplitLayout& layout = layouts[static_cast<size_t>(split)];
      hdf5::Handle group = hdf5::create_group(file, split_name(split));
      std::vector<hsize_t> dims = {static_cast<hsize_t>(layout.rows()), static_cast<hsize_t>(attributes.hidden_size)};
      for (const RowDataset& rows : kRowDatasets) {
        if ((std::string(rows.name) == "activations") == attributes.holds_expert_choices()) continue;
        hdf5::create_dataset(group.get(), rows.name, rows.file_type(), dims,
                             {row_chunk(layout.rows(), attributes.hidden_size), false, true});
      }
      write_int_dataset(group.get(), "labels", layout.labels, false);
      write_int_dataset(group.get(), "example_index", layout.example_index, false);
      if (!layout.offsets.empty()) {
        write_int_dataset(group.get(), "offsets", layout.offsets, false);
        write_int_dataset(group.get(), "token_ids", layout.token_ids, false);
      }
      if (!layout.metadata.empty()) {
        hdf5::Handle metadata = hdf5::create_group(group.get(), "metadata");
        for (const auto& [field, values] : layout.metadata) hdf5::write_string_dataset(metadata.get(), field, values);
      }
    }
    hdf5::flush(file);
    writer.open_datasets();
    return writer;
  } catch (const std::exception&) {
    rethrow_with_context(partial + ": creating the file");
  }
}

ActivationWriter ActivationWriter::resume(const std::string& final_path, const FileAttributes& attributes) {
  std::string partial = partial_path_for(final_path);
  hdf5::Handle file = hdf5::open_file(partial, true);
  FileAttributes existing = load_attributes(file.get(), partial);
  std::string difference = attributes.identity_difference(existing);
  if (!difference.empty()) {
    fail("{}: cannot resume: the partial file {} (use --overwrite to start again)", partial, difference);
  }
  ActivationWriter writer(final_path, std::move(file), attributes);
  writer.examples_done_ = read_progress(partial);
  writer.open_datasets();
  return writer;
}

void ActivationWriter::open_datasets() {
  for (Split split : kSplits) {
    auto group = hdf5::open_group(file_.get(), split_name(split));
    if (!group) fail("{}: missing group '{}'", partial_path_, split_name(split));
    auto open = [&](const char* name) {
      auto dataset = hdf5::open_dataset(group->get(), name);
      if (!dataset) fail("{}: missing dataset '{}/{}'", partial_path_, split_name(split), name);
      return std::move(*dataset);
    };
    const auto s = static_cast<size_t>(split);
    activation_datasets_[s] = open(expert_choices_ ? "expert_weights" : "activations");
    if (expert_choices_) expert_id_datasets_[s] = open("expert_ids");
  }
}

void ActivationWriter::write_rows(Split split, int64_t row, int64_t rows, const float* data) {
  const auto s = static_cast<size_t>(split);
  try {
    if (!expert_choices_) {
      hdf5::write_rows(activation_datasets_[s].get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(row),
                       static_cast<hsize_t>(rows), data);
      return;
    }
    // Each row is the k ids, then the k weights.
    std::vector<int32_t> ids(static_cast<size_t>(rows * hidden_));
    std::vector<float> weights(ids.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < hidden_; ++j) {
        ids[static_cast<size_t>(r * hidden_ + j)] = static_cast<int32_t>(data[r * 2 * hidden_ + j]);
        weights[static_cast<size_t>(r * hidden_ + j)] = data[r * 2 * hidden_ + hidden_ + j];
      }
    }
    hdf5::write_rows(expert_id_datasets_[s].get(), H5T_NATIVE_INT32, static_cast<hsize_t>(row), static_cast<hsize_t>(rows),
                     ids.data());
    hdf5::write_rows(activation_datasets_[s].get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(row),
                     static_cast<hsize_t>(rows), weights.data());
  } catch (const std::exception&) {
    rethrow_with_context(fmt::format("{}: writing {} rows of group '{}'", partial_path_, rows, split_name(split)));
  }
}

void ActivationWriter::commit(int64_t examples_done) {
  try {
    hdf5::flush(file_.get());
    // The record lives beside the file and is replaced atomically, so the HDF5 file's metadata never
    // changes after creation.
    write_file_atomic(progress_path_for(partial_path_), fmt::format("examples_done={}\n", examples_done));
  } catch (const std::exception&) {
    rethrow_with_context(fmt::format("{}: saving the first {} examples", partial_path_, examples_done));
  }
  examples_done_ = examples_done;
}

FileAttributes ActivationWriter::attributes() const { return load_attributes(file_.get(), partial_path_); }

bool has_progress_record(const std::string& final_path) {
  return is_regular_file(progress_path_for(partial_path_for(final_path)));
}

void ActivationWriter::finish() {
  bool gzip = hdf5::get_string_attribute(file_.get(), "compression").value_or("none") == "gzip";
  activation_datasets_ = {};
  expert_id_datasets_ = {};
  if (gzip) {
    hdf5::flush(file_.get());
    file_.reset();
    std::string temporary = final_path_ + ".tmp";
    try {
      write_compressed_copy(partial_path_, temporary);
    } catch (const std::exception&) {
      std::remove(temporary.c_str());
      rethrow_with_context(final_path_ + ": writing the compressed file");
    }
    if (std::rename(temporary.c_str(), final_path_.c_str()) != 0) fail("cannot rename {} to {}", temporary, final_path_);
    std::remove(partial_path_.c_str());
  } else {
    hdf5::set_attribute(file_.get(), kCompleteAttribute, int64_t{1});
    hdf5::flush(file_.get());
    file_.reset();
    if (std::rename(partial_path_.c_str(), final_path_.c_str()) != 0) {
      fail("cannot rename {} to {}", partial_path_, final_path_);
    }
  }
  std::remove(progress_path_for(partial_path_).c_str());
}

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
