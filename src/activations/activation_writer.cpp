#include "activations/activation_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "activations/file_format.h"
#include "common/error.h"
#include "common/files.h"

namespace probekit::activations {

using format::kCompleteAttribute;
using format::load_attributes;
using format::row_chunk;
using format::write_attributes;
using format::write_int_dataset;

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

void copy_rows_compressed(hid_t from, hid_t to, const RowDataset& rows_dataset) {
  auto source = hdf5::open_dataset(from, rows_dataset.name);
  if (!source) fail("missing dataset '{}'", rows_dataset.name);
  std::vector<hsize_t> dims = hdf5::dataset_dims(source->get());
  hdf5::Handle copy = hdf5::create_dataset(to, rows_dataset.name, rows_dataset.file_type(), dims,
                                           {row_chunk(static_cast<int64_t>(dims[0]), rows_dataset.width), true});
  constexpr hsize_t kBlockRows = 4096;
  std::vector<uint32_t> block;  // 4-byte values of either type
  for (hsize_t row = 0; row < dims[0]; row += kBlockRows) {
    hsize_t rows = std::min(kBlockRows, dims[0] - row);
    block.resize(rows * static_cast<hsize_t>(rows_dataset.columns()));
    hdf5::read_rows(source->get(), rows_dataset.memory_type(), row, rows, block.data());
    hdf5::write_rows(copy.get(), rows_dataset.memory_type(), row, rows, block.data());
  }
}

// Writes a compressed copy of a finished partial file: partial files are never compressed, because writing
// compressed chunks changes the file's metadata and a killed process could leave it unreadable.
void write_compressed_copy(const std::string& source, const std::string& target) {
  hdf5::Handle in = hdf5::open_file(source, false);
  hdf5::Handle out = hdf5::create_file(target);
  const FileAttributes attributes = load_attributes(in.get(), source);
  write_attributes(out.get(), attributes);
  hdf5::set_attribute(out.get(), kCompleteAttribute, int64_t{1});
  for (Split split : kSplits) {
    auto from = hdf5::open_group(in.get(), split_name(split));
    if (!from) fail("{}: missing group '{}'", source, split_name(split));
    hdf5::Handle to = hdf5::create_group(out.get(), split_name(split));
    for (const RowDataset& rows : row_datasets(attributes)) copy_rows_compressed(from->get(), to.get(), rows);
    for (const char* name : {"labels", "example_index", "offsets", "token_ids", "positions", "token_labels"}) copy_int_dataset(from->get(), to.get(), name);
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
      datasets_(row_datasets(attributes)), row_width_(attributes.row_width()) {}

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
      for (const RowDataset& rows : writer.datasets_) {
        hdf5::create_dataset(group.get(), rows.name, rows.file_type(), rows.dims(layout.rows()),
                             {row_chunk(layout.rows(), rows.width), false, true});
      }
      write_int_dataset(group.get(), "labels", layout.labels, false);
      write_int_dataset(group.get(), "example_index", layout.example_index, false);
      if (!layout.offsets.empty()) {
        write_int_dataset(group.get(), "offsets", layout.offsets, false);
        write_int_dataset(group.get(), "token_ids", layout.token_ids, false);
        if (!layout.positions.empty()) write_int_dataset(group.get(), "positions", layout.positions, false);
        if (!layout.token_labels.empty()) write_int_dataset(group.get(), "token_labels", layout.token_labels, false);
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
    std::vector<hdf5::Handle>& handles = datasets_open_[static_cast<size_t>(split)];
    handles.clear();
    for (const RowDataset& rows : datasets_) handles.push_back(open(rows.name));
  }
}

void ActivationWriter::write_rows(Split split, int64_t row, int64_t rows, const float* data) {
  const std::vector<hdf5::Handle>& handles = datasets_open_[static_cast<size_t>(split)];
  try {
    std::vector<uint32_t> columns;  // 4-byte values of either type
    for (size_t d = 0; d < datasets_.size(); ++d) {
      const RowDataset& dataset = datasets_[d];
      const int64_t width = dataset.columns();
      const void* values = data;
      if (width != row_width_ || dataset.integer) {
        columns.resize(static_cast<size_t>(rows * width));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < width; ++j) {
            const float value = data[r * row_width_ + dataset.offset + j];
            const auto at = static_cast<size_t>(r * width + j);
            if (dataset.integer) {
              const auto id = static_cast<int32_t>(value);  // ids and counts ride as exact floats
              std::memcpy(&columns[at], &id, sizeof id);
            } else {
              std::memcpy(&columns[at], &value, sizeof value);
            }
          }
        }
        values = columns.data();
      }
      hdf5::write_rows(handles[d].get(), dataset.memory_type(), static_cast<hsize_t>(row), static_cast<hsize_t>(rows),
                       values);
    }
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
  datasets_open_ = {};
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

}  // namespace probekit::activations
