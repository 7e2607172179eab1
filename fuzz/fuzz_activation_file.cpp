// The activation-file reader (read_activation_file) on HDF5 files whose structure and content the input
// decides: groups and datasets present or missing, ranks, shapes up to sizes no file could back, element
// types, labels, example indexes, per-token offsets, metadata columns, NaN and Inf, and the root attributes
// (label_names, hidden_size, complete). The files are written through the HDF5 API, so what is fuzzed is
// every decision our reader makes; libhdf5's parsing of corrupt bytes is libhdf5's (OSS-Fuzz covers it).
// A file the reader accepts must keep the promises activation_store.h makes to the trainers and inference.
#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "activations/activation_store.h"
#include "io/hdf5.h"

using namespace probekit;

namespace {

// Dimensions: mostly small, sometimes declaring more data than any file holds (chunks left unwritten).
hsize_t pick_dimension(FuzzedDataProvider& in) {
  static constexpr hsize_t kDimensions[] = {0, 1, 2, 3, 4, 5, 6, 8, 1ull << 31, (1ull << 32) + 1, 1ull << 62};
  return in.PickValueInArray(kDimensions);
}

float pick_float(FuzzedDataProvider& in) {
  static constexpr float kValues[] = {0.0f, 1.5f, -2.25f, 1e-40f, 3e38f, std::numeric_limits<float>::quiet_NaN(),
                                      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  if (in.ConsumeBool()) return in.PickValueInArray(kValues);
  return static_cast<float>(in.ConsumeIntegralInRange<int>(-100, 100)) / 8.0f;
}

hid_t pick_file_type(FuzzedDataProvider& in, hid_t usual) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return H5T_IEEE_F64LE;
    case 1: return H5T_STD_I32LE;
    case 2: return H5T_IEEE_F32BE;
    case 3: return H5T_STD_U8LE;
    default: return usual;
  }
}

// Creates a dataset of the input's rank, shape and type under `parent` and fills it when small enough.
void add_dataset(FuzzedDataProvider& in, hid_t parent, const std::string& name, hid_t usual_type, int usual_rank,
                 hsize_t usual_rows, hsize_t usual_columns, int64_t value_limit) {
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return;  // missing
  int rank = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : usual_rank;
  bool usual_shape = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  for (size_t d = 0; d < dims.size(); ++d) {
    dims[d] = usual_shape ? (d == 0 ? usual_rows : usual_columns) : pick_dimension(in);
  }
  hid_t type = pick_file_type(in, usual_type);
  hsize_t elements = 1;
  for (hsize_t d : dims) elements = d != 0 && elements > (1ull << 40) / d ? (1ull << 40) : elements * d;

  hdf5::Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
  hdf5::Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (elements > 0) {
    std::vector<hsize_t> chunk(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) chunk[d] = std::min<hsize_t>(dims[d], 64);
    H5Pset_chunk(properties.get(), rank, chunk.data());
  }
  hid_t id = H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT);
  if (id < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  hdf5::Handle dataset(id, H5Dclose);
  if (elements == 0 || elements > 4096) return;  // huge datasets stay unwritten: reading gives fill values
  if (H5Tget_class(type) == H5T_FLOAT) {
    std::vector<float> values(elements);
    for (float& v : values) v = pick_float(in);
    H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  } else {
    std::vector<int64_t> values(elements);
    int64_t previous = 0;
    for (int64_t& v : values) {
      // Offsets grow from 0 unless the input says otherwise; other integers stay near the valid range.
      v = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int64_t>(-2, value_limit + 2)
                                                    : previous + in.ConsumeIntegralInRange<int64_t>(0, 3);
      if (name != "offsets") v = std::min(v, value_limit);
      previous = v;
    }
    H5Dwrite(dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  H5Eclear2(H5E_DEFAULT);
}

void write_file(FuzzedDataProvider& in, const std::string& path) {
  hdf5::Handle file = hdf5::create_file(path);
  auto label_count = in.ConsumeIntegralInRange<int64_t>(0, 4);
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: break;  // a reference file: no label_names
    case 1: hdf5::set_attribute(file.get(), "label_names", int64_t{3}); break;
    default: {
      std::vector<std::string> names;
      for (int64_t i = 0; i < label_count; ++i) names.push_back(in.ConsumeRandomLengthString(12));
      hdf5::set_attribute(file.get(), "label_names", names);
    }
  }
  auto hidden = static_cast<hsize_t>(in.ConsumeIntegralInRange<int>(0, 6));
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: break;
    case 1: hdf5::set_attribute(file.get(), "hidden_size", std::string("64")); break;
    case 2: hdf5::set_attribute(file.get(), "hidden_size", std::vector<int64_t>{4, 4}); break;
    default: hdf5::set_attribute(file.get(), "hidden_size", static_cast<int64_t>(in.ConsumeBool() ? hidden : pick_dimension(in)));
  }
  if (in.ConsumeBool()) hdf5::set_attribute(file.get(), "complete", in.ConsumeIntegralInRange<int64_t>(-1, 2));
  if (in.ConsumeBool()) hdf5::set_attribute(file.get(), "position", in.ConsumeBool() ? std::string("all") : std::string("last"));
  if (in.ConsumeBool()) hdf5::set_attribute(file.get(), "layer", in.ConsumeIntegral<int64_t>());

  int64_t label_limit = label_count == 0 ? 45 : label_count;
  for (activations::Split split : activations::kSplits) {
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0) continue;  // missing group
    hdf5::Handle group = hdf5::create_group(file.get(), activations::split_name(split));
    auto examples = static_cast<hsize_t>(in.ConsumeIntegralInRange<int>(0, 5));
    bool per_token = in.ConsumeBool();
    hsize_t rows = per_token ? static_cast<hsize_t>(in.ConsumeIntegralInRange<int>(0, 12)) : examples;
    add_dataset(in, group.get(), "activations", H5T_IEEE_F32LE, 2, rows, hidden, 0);
    add_dataset(in, group.get(), "labels", H5T_STD_I64LE, 1, examples, 0, label_limit - 1);
    if (in.ConsumeBool()) add_dataset(in, group.get(), "example_index", H5T_STD_I64LE, 1, examples, 0, 1000);
    if (per_token) {
      add_dataset(in, group.get(), "offsets", H5T_STD_I64LE, 1, examples + 1, 0, static_cast<int64_t>(rows));
      add_dataset(in, group.get(), "token_ids", H5T_STD_I64LE, 1, rows, 0, 1000);
    }
    if (in.ConsumeBool()) {
      hdf5::Handle metadata = hdf5::create_group(group.get(), "metadata");
      for (int column = in.ConsumeIntegralInRange<int>(0, 2); column > 0; --column) {
        std::string name = in.ConsumeBool() ? "domain" : std::string(300, 'x');
        if (in.ConsumeBool()) {
          std::vector<std::string> values(in.ConsumeBool() ? examples : in.ConsumeIntegralInRange<size_t>(0, 6));
          for (std::string& value : values) value = in.ConsumeRandomLengthString(8);
          if (!hdf5::exists(metadata.get(), name)) hdf5::write_string_dataset(metadata.get(), name, values);
        } else if (!hdf5::exists(metadata.get(), name)) {
          add_dataset(in, metadata.get(), name, H5T_STD_I64LE, 1, examples, 0, 5);
        }
      }
    }
  }
}

void check_promises(const activations::ActivationFile& file) {
  const activations::FileAttributes& a = file.attributes;
  if (a.label_names.empty()) fuzz::finding("no label names");
  for (activations::Split split : activations::kSplits) {
    const activations::SplitData& s = file.split(split);
    if (s.hidden != a.hidden_size) fuzz::finding("a group's width differs from hidden_size");
    if (s.rows < 0 || s.hidden < 0 || s.activations.size() != static_cast<size_t>(s.rows * s.hidden)) {
      fuzz::finding("activations do not hold rows x hidden values");
    }
    for (float v : s.activations) {
      if (!std::isfinite(v)) fuzz::finding("a NaN or Inf activation was accepted");
    }
    for (int64_t label : s.labels) {
      if (label < 0 || label >= static_cast<int64_t>(a.label_names.size())) fuzz::finding("a label outside label_names");
    }
    if (!s.example_index.empty() && s.example_index.size() != s.labels.size()) fuzz::finding("example_index length");
    if (s.offsets.empty()) {
      if (s.rows != s.examples()) fuzz::finding("rows != examples without offsets");
    } else {
      if (s.offsets.size() != s.labels.size() + 1 || s.offsets.front() != 0 || s.offsets.back() != s.rows ||
          s.token_ids.size() != static_cast<size_t>(s.rows)) {
        fuzz::finding("offsets do not cover the rows");
      }
      for (size_t i = 1; i < s.offsets.size(); ++i) {
        if (s.offsets[i] < s.offsets[i - 1]) fuzz::finding("offsets decrease");
      }
    }
    for (const auto& [name, values] : s.metadata) {
      if (values.size() != s.labels.size()) fuzz::finding("metadata column '" + name + "' is not one value per example");
    }
  }
}

}  // namespace

// Reference files without label_names are accepted with a warning, which would flood the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::err);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("layer_3_activations.h5");
  FuzzedDataProvider in(data, size);
  write_file(in, path);
  activations::ActivationFile file;
  if (fuzz::completes_or_refuses_cleanly([&] { file = activations::read_activation_file(path); })) check_promises(file);
  fuzz::completes_or_refuses_cleanly([&] { activations::read_attributes(path); });
  return 0;
}
