// The activation-file reader on files that are valid HDF5 but break the layout's promises (cases found by
// fuzz/fuzz_activation_file.cpp) or left incomplete: each is refused naming the file, the group and what is wrong.
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "io/hdf5.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::TempDir;
using activations::Split;

namespace {

// A complete file of 4 train, 2 val and 2 test examples of width 3 with a metadata column named `column`.
std::string write_small_file(const TempDir& tmp, const std::string& column = "domain") {
  activations::FileAttributes attributes;
  attributes.layer = 3;
  attributes.layers = {3};
  attributes.label_names = {"a", "b"};
  attributes.hidden_size = 3;
  const std::array<int64_t, 3> counts = {4, 2, 2};
  std::array<activations::SplitLayout, 3> layouts;
  for (size_t s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < counts[s]; ++i) {
      layouts[s].labels.push_back(i % 2);
      layouts[s].example_index.push_back(static_cast<int64_t>(s) * 10 + i);
      layouts[s].metadata[column].push_back("value " + std::to_string(i));
    }
  }
  std::string path = tmp.file("layer_3_activations.h5");
  auto writer = activations::ActivationWriter::create(path, attributes, layouts, false);
  for (Split split : activations::kSplits) {
    int64_t rows = counts[static_cast<size_t>(split)];
    std::vector<float> values(static_cast<size_t>(rows * 3));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
    writer.write_rows(split, 0, rows, values.data());
  }
  writer.commit(8);
  writer.finish();
  return path;
}

hdf5::Handle open_group(const hdf5::Handle& file, const char* name) { return std::move(*hdf5::open_group(file.get(), name)); }

std::string read_error(const std::string& path) {
  try {
    activations::read_activation_file(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected " << path << " to be refused");
  return "";
}

}  // namespace

TEST_CASE("fuzz regression (fuzz_activation_file): a dataset declaring more values than the file stores is refused") {
  // A file of a few kilobytes declared [2^31, 3] activations and left the chunks unwritten: the reader tried to
  // allocate 24 GiB for them (and, beyond 2^64 bytes, sized its buffer from an overflowed product).
  TempDir tmp;
  std::string path = write_small_file(tmp);
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::Handle val = open_group(file, "val");
    H5Ldelete(val.get(), "activations", H5P_DEFAULT);
    hdf5::create_dataset(val.get(), "activations", H5T_IEEE_F32LE, {1ull << 31, 3}, {{64, 3}, false, false});
  }
  CHECK_CONTAINS(read_error(path), "layer_3_activations.h5: group 'val'/activations: declares [2147483648, 3] values "
                                   "(25769803776 bytes) but the file stores only 0 bytes of them");

  // An interrupted writer leaves the chunks it never wrote missing; they must not read back as zeros.
  path = write_small_file(tmp);
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::Handle train = open_group(file, "train");
    H5Ldelete(train.get(), "activations", H5P_DEFAULT);
    hdf5::Handle partly = hdf5::create_dataset(train.get(), "activations", H5T_IEEE_F32LE, {4, 3}, {{2, 3}, false, false});
    std::vector<float> rows(6, 1.0f);
    hdf5::write_rows(partly.get(), H5T_NATIVE_FLOAT, 0, 2, rows.data());
  }
  CHECK_CONTAINS(read_error(path), "group 'train'/activations: declares [4, 3] values (48 bytes) but the file stores "
                                   "only 24 bytes of them (truncated or corrupt file?)");
}

TEST_CASE("fuzz regression (fuzz_activation_file): metadata columns hold one value per example") {
  TempDir tmp;
  std::string path = write_small_file(tmp);
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::Handle metadata = std::move(*hdf5::open_group(open_group(file, "train").get(), "metadata"));
    H5Ldelete(metadata.get(), "domain", H5P_DEFAULT);
    hdf5::write_string_dataset(metadata.get(), "domain", {"only one"});
  }
  CHECK_CONTAINS(read_error(path), "group 'train': metadata column 'domain' has 1 values for 4 examples");
}

TEST_CASE("fuzz regression (fuzz_activation_file): per-token offsets start at 0 and never decrease") {
  TempDir tmp;
  auto with_offsets = [&](const std::vector<int64_t>& offsets) {
    std::string path = write_small_file(tmp);
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::Handle test = open_group(file, "test");
    hdf5::Handle dataset = hdf5::create_dataset(test.get(), "offsets", H5T_STD_I64LE, {offsets.size()}, {{offsets.size()}, false, false});
    hdf5::write_rows(dataset.get(), H5T_NATIVE_INT64, 0, offsets.size(), offsets.data());
    std::vector<int64_t> token_ids = {7, 8};
    dataset = hdf5::create_dataset(test.get(), "token_ids", H5T_STD_I64LE, {2}, {{2}, false, false});
    hdf5::write_rows(dataset.get(), H5T_NATIVE_INT64, 0, 2, token_ids.data());
    return path;
  };
  CHECK_CONTAINS(read_error(with_offsets({0, 3, 2})), "group 'test': per-token offsets decrease after example 1");
  CHECK_CONTAINS(read_error(with_offsets({1, 1, 2})), "group 'test': per-token offsets/token_ids do not match 2 examples");
  CHECK(activations::read_activation_file(with_offsets({0, 1, 2})).split(Split::kTest).offsets.size() == 3);
}

TEST_CASE("metadata columns keep names longer than 255 characters") {
  // The reader read member names into a 256-byte buffer, so such a column was dropped without a word.
  TempDir tmp;
  std::string name(300, 'k');
  auto file = activations::read_activation_file(write_small_file(tmp, name));
  REQUIRE(file.split(Split::kVal).metadata.count(name) == 1);
  CHECK(file.split(Split::kVal).metadata.at(name) == std::vector<std::string>{"value 0", "value 1"});
}

TEST_CASE("a file whose capture was interrupted is refused, pointing to --resume") {
  TempDir tmp;
  std::string path = write_small_file(tmp);
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::set_attribute(file.get(), "complete", int64_t{0});
  }
  CHECK_CONTAINS(read_error(path), "layer_3_activations.h5: the file is incomplete (its capture was interrupted); finish "
                                   "it with capture_activations --resume");
  CHECK_THROWS_WITH(activations::read_attributes(path), doctest::Contains("the file is incomplete"));
}

namespace {

// A file holding one stored int64 dataset "values" of `rows` rows, each row's value its row + `first`.
void write_values_file(const std::string& path, int64_t rows, int64_t first) {
  hdf5::Handle file = hdf5::create_file(path);
  std::vector<int64_t> values;
  for (int64_t i = 0; i < rows; ++i) values.push_back(first + i);
  hdf5::Handle dataset = hdf5::create_dataset(file.get(), "values", H5T_STD_I64LE, {values.size()}, {{values.size()}});
  hdf5::write_rows(dataset.get(), H5T_NATIVE_INT64, 0, values.size(), values.data());
}

}  // namespace

TEST_CASE("virtual datasets: read through their sources, which must exist, store their values and keep their shape") {
  TempDir tmp;
  make_directories(tmp.file("parts"));
  write_values_file(tmp.file("parts/a.h5"), 3, 0);
  write_values_file(tmp.file("parts/b.h5"), 2, 3);
  {
    hdf5::Handle file = hdf5::create_file(tmp.file("joined.h5"));
    hdf5::create_virtual_dataset(file.get(), "values", H5T_STD_I64LE, {5},
                                 {{"parts/a.h5", "values", 0, 3}, {"parts/b.h5", "values", 3, 2}});
    hdf5::create_virtual_dataset(file.get(), "gap", H5T_STD_I64LE, {6}, {{"parts/a.h5", "values", 0, 3}});
    hdf5::create_virtual_dataset(file.get(), "itself", H5T_STD_I64LE, {5}, {{".", "values", 0, 5}});
  }
  auto read = [&](const std::string& name) {
    hdf5::Handle file = hdf5::open_file(tmp.file("joined.h5"), false);
    auto dataset = hdf5::open_dataset(file.get(), name);
    std::vector<int64_t> values(hdf5::stored_element_count(dataset->get(), name));
    hdf5::read_rows(dataset->get(), H5T_NATIVE_INT64, 0, values.size(), values.data());
    return values;
  };
  // The sources are found beside the virtual file, whatever the working directory.
  CHECK(read("values") == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK_THROWS_WITH(read("gap"), doctest::Contains("gap: its virtual mappings cover 3 of its 6 values"));
  CHECK_THROWS_WITH(read("itself"), doctest::Contains("maps another virtual dataset"));
  write_values_file(tmp.file("parts/b.h5"), 4, 3);
  CHECK_THROWS_WITH(read("values"), doctest::Contains("parts/b.h5:values is [4] but the mapping expects [2]"));
  std::remove(tmp.file("parts/b.h5").c_str());
  std::string missing = "its values are read from " + tmp.file("parts/b.h5") + ", which is missing";
  CHECK_THROWS_WITH(read("values"), doctest::Contains(missing.c_str()));
}

TEST_CASE("a malformed or negative layer attribute is an error of the file, naming it") {
  TempDir tmp;
  const std::string path = write_small_file(tmp);
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::set_attribute(file.get(), "layer", std::string("three"));
  }
  CHECK(read_error(path) == path + ": attribute layer is not an integer");
  {
    hdf5::Handle file = hdf5::open_file(path, true);
    hdf5::set_attribute(file.get(), "layer", int64_t{-3});
  }
  CHECK(read_error(path) == path + ": attribute 'layer': layer -3 is out of range (layers are numbered from 0)");
  CHECK_THROWS_WITH_AS(activations::read_attributes(path), doctest::Contains("layer -3 is out of range"), std::runtime_error);
}
