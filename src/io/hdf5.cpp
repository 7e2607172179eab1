#include "io/hdf5.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>

#include "common/error.h"
#include "common/files.h"

namespace probekit::hdf5 {

namespace {

// libhdf5 describes a failed system call as "file write failed: time = ..., filename = ..., file descriptor = 5,
// errno = 28, error message = 'No space left on device', buf = ..., offset = ..."; what failed and the
// system's reason are what a user needs.
std::string shorten_system_error(const std::string& description) {
  const std::string marker = "error message = '";
  auto reason = description.find(marker);
  if (reason == std::string::npos) return description;
  reason += marker.size();
  std::string what = description.substr(0, description.find_first_of(":,"));
  return what + ": " + description.substr(reason, description.find('\'', reason) - reason);
}

// The innermost HDF5 error description on the stack ("file signature not found", "file write failed: No
// space left on device").
std::string last_error() {
  std::string message;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* error, void* out) -> herr_t {
        auto* text = static_cast<std::string*>(out);
        if (text->empty() && error->desc != nullptr) *text = error->desc;
        return 0;
      },
      &message);
  H5Eclear2(H5E_DEFAULT);
  return message.empty() ? "HDF5 error" : shorten_system_error(message);
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) fail("{}: {}", what, last_error());
  return id;
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) fail("{}: {}", what, last_error());
}

Handle utf8_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

Handle simple_space(const std::vector<hsize_t>& dims) {
  return Handle(check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "cannot create dataspace"),
                H5Sclose);
}

void delete_attribute_if_present(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
}

Handle open_attribute(hid_t object, const std::string& name) {
  return Handle(check(H5Aopen(object, name.c_str(), H5P_DEFAULT), "cannot open attribute " + name), H5Aclose);
}

// Reads a string-typed attribute or dataset (fixed or variable length) element by element.
std::vector<std::string> read_strings(hid_t object, bool is_attribute, const std::string& what) {
  Handle file_type(check(is_attribute ? H5Aget_type(object) : H5Dget_type(object), what), H5Tclose);
  if (H5Tget_class(file_type.get()) != H5T_STRING) fail("{} is not a string", what);
  Handle space(check(is_attribute ? H5Aget_space(object) : H5Dget_space(object), what), H5Sclose);
  hssize_t count = is_attribute ? H5Sget_simple_extent_npoints(space.get())
                                : static_cast<hssize_t>(stored_element_count(object, what));
  if (count < 0) fail("{}: cannot read its size", what);
  std::vector<std::string> values;
  if (H5Tis_variable_str(file_type.get()) > 0) {
    Handle memory_type = utf8_string_type();
    std::vector<char*> pointers(static_cast<size_t>(count), nullptr);
    herr_t status = is_attribute ? H5Aread(object, memory_type.get(), pointers.data())
                                 : H5Dread(object, memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data());
    check_status(status, "cannot read " + what);
    for (char* p : pointers) values.emplace_back(p ? p : "");
    H5Dvlen_reclaim(memory_type.get(), space.get(), H5P_DEFAULT, pointers.data());
  } else {
    size_t width = H5Tget_size(file_type.get());
    std::vector<char> buffer(width * static_cast<size_t>(count));
    herr_t status = is_attribute ? H5Aread(object, file_type.get(), buffer.data())
                                 : H5Dread(object, file_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data());
    check_status(status, "cannot read " + what);
    for (hssize_t i = 0; i < count; ++i) {
      const char* start = buffer.data() + static_cast<size_t>(i) * width;
      size_t length = 0;
      while (length < width && start[length] != '\0') ++length;
      values.emplace_back(start, length);
    }
  }
  return values;
}

}  // namespace

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_ != nullptr) closer_(id_);
  id_ = H5I_INVALID_HID;
}

namespace {

// Whether HDF5's 8-byte signature is where HDF5 puts it: at byte 0, or after a user block at 512, 1024, 2048, ...
// (or the file cannot be read to tell).
bool has_hdf5_signature(const std::string& path) {
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  std::ifstream in(path, std::ios::binary);
  if (!in) return true;  // unreadable: HDF5's own message says why
  const uint64_t size = file_size(path);
  for (uint64_t offset = 0; offset + 8 <= size; offset = offset == 0 ? 512 : offset * 2) {
    char bytes[8] = {};
    in.seekg(static_cast<std::streamoff>(offset));
    if (!in.read(bytes, 8)) return false;
    if (std::memcmp(bytes, kSignature, 8) == 0) return true;
  }
  return false;
}

}  // namespace

void prepare_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

Handle create_file(const std::string& path) {
  prepare_library();
  return Handle(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "cannot create " + path),
                H5Fclose);
}

Handle open_file(const std::string& path, bool writable) {
  require_input_file(path);
  prepare_library();
  const hid_t file = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  // HDF5's own word for another kind of file is "file signature not found": said plainly, naming the file.
  if (file < 0 && !has_hdf5_signature(path)) fail("{}: not an HDF5 file (it does not start as one)", path);
  return Handle(check(file, "cannot open HDF5 file " + path), H5Fclose);
}

Handle create_group(hid_t parent, const std::string& name) {
  return Handle(check(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                      "cannot create group " + name),
                H5Gclose);
}

bool exists(hid_t parent, const std::string& name) { return H5Lexists(parent, name.c_str(), H5P_DEFAULT) > 0; }

std::vector<std::string> member_names(hid_t group) {
  H5G_info_t info{};
  check_status(H5Gget_info(group, &info), "cannot list a group");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t length = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0) fail("cannot read the name of a group member: {}", last_error());
    std::string name(static_cast<size_t>(length) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.pop_back();
    names.push_back(std::move(name));
  }
  return names;
}

namespace {

// `name` under `parent` opened with `open` (H5Gopen2, H5Dopen2) and closed with `close`; nothing where it is
// missing or is not of the kind `open` opens.
std::optional<Handle> open_existing(hid_t parent, const std::string& name, hid_t (*open)(hid_t, const char*, hid_t),
                                    Handle::Closer close) {
  if (!exists(parent, name)) return std::nullopt;
  hid_t id = open(parent, name.c_str(), H5P_DEFAULT);
  if (id < 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  return Handle(id, close);
}

}  // namespace

std::optional<Handle> open_group(hid_t parent, const std::string& name) {
  return open_existing(parent, name, H5Gopen2, H5Gclose);
}

std::optional<Handle> open_dataset(hid_t parent, const std::string& name) {
  return open_existing(parent, name, H5Dopen2, H5Dclose);
}

Handle create_dataset(hid_t parent, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                      const Storage& storage) {
  Handle space = simple_space(dims);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  bool empty = false;
  for (hsize_t d : dims) empty = empty || d == 0;
  if (!empty) {
    check_status(H5Pset_chunk(properties.get(), static_cast<int>(storage.chunk.size()), storage.chunk.data()),
                 "cannot set chunks of " + name);
    if (storage.gzip) {
      H5Pset_shuffle(properties.get());
      H5Pset_deflate(properties.get(), 4);
    }
    if (storage.allocate_now) {
      H5Pset_alloc_time(properties.get(), H5D_ALLOC_TIME_EARLY);
      H5Pset_fill_time(properties.get(), H5D_FILL_TIME_NEVER);
    }
  }
  return Handle(check(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
                      "cannot create dataset " + name),
                H5Dclose);
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  Handle space(check(H5Dget_space(dataset), "cannot read a dataset's shape"), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot read a dataset's rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

namespace {

// A string of a virtual dataset's mapping (its source file or dataset name).
std::string mapping_string(hid_t properties, size_t index, ssize_t (*get)(hid_t, size_t, char*, size_t),
                           const std::string& what) {
  ssize_t length = get(properties, index, nullptr, 0);
  if (length < 0) fail("{}: cannot read virtual mapping {}: {}", what, index, last_error());
  std::string text(static_cast<size_t>(length) + 1, '\0');
  get(properties, index, text.data(), text.size());
  text.pop_back();
  return text;
}

// The file a virtual mapping names, where HDF5 finds it: "." is the virtual file itself, a relative name is
// looked up in the virtual file's directory.
std::string mapped_file_path(hid_t dataset, const std::string& name) {
  ssize_t length = H5Fget_name(dataset, nullptr, 0);
  if (length < 0) fail("cannot read the name of a virtual dataset's file: {}", last_error());
  std::string own(static_cast<size_t>(length) + 1, '\0');
  H5Fget_name(dataset, own.data(), own.size());
  own.pop_back();
  if (name == ".") return own;
  if (!name.empty() && name[0] == '/') return name;
  std::string directory = parent_directory(own);
  return directory.empty() ? name : directory + "/" + name;
}

// A virtual dataset's sources must store their values: one level only, so that checking a file costs one open
// per mapping, whatever a crafted file maps (itself, or a chain of virtual datasets).
constexpr int kMaxVirtualDepth = 1;

uint64_t checked_element_count(hid_t dataset, const std::string& what, int depth);

void check_virtual_sources(hid_t dataset, hid_t properties, const std::vector<hsize_t>& dims, uint64_t elements,
                           const std::string& what, int depth) {
  if (depth >= kMaxVirtualDepth) fail("{}: maps another virtual dataset; only one level of mappings is read", what);
  size_t count = 0;
  check_status(H5Pget_virtual_count(properties, &count), "cannot read the virtual mappings of " + what);
  uint64_t mapped = 0;
  for (size_t i = 0; i < count; ++i) {
    std::string path = mapped_file_path(dataset, mapping_string(properties, i, H5Pget_virtual_filename, what));
    std::string name = mapping_string(properties, i, H5Pget_virtual_dsetname, what);
    if (!is_regular_file(path)) fail("{}: its values are read from {}, which is missing", what, path);
    Handle file = open_file(path, false);
    std::optional<Handle> source = open_dataset(file.get(), name);
    if (!source) fail("{}: its values are read from {}, which has no dataset {}", what, path, name);
    // The file keeps a source's selection but not always its extent: the block it fills in the virtual
    // dataset says what shape the source must have.
    Handle virtual_space(check(H5Pget_virtual_vspace(properties, i), what), H5Sclose);
    std::vector<hsize_t> first(dims.size()), last(dims.size()), expected(dims.size());
    check_status(H5Sget_select_bounds(virtual_space.get(), first.data(), last.data()), "cannot read a mapping of " + what);
    for (size_t d = 0; d < dims.size(); ++d) expected[d] = last[d] - first[d] + 1;
    std::vector<hsize_t> found = dataset_dims(source->get());
    if (found != expected) {
      fail("{}: its source {}:{} is [{}] but the mapping expects [{}] (was that file made again?)", what, path, name,
           fmt::join(found, ", "), fmt::join(expected, ", "));
    }
    checked_element_count(source->get(), fmt::format("{} (source {}:{})", what, path, name), depth + 1);
    mapped += static_cast<uint64_t>(std::max<hssize_t>(0, H5Sget_select_npoints(virtual_space.get())));
  }
  if (mapped != elements) fail("{}: its virtual mappings cover {} of its {} values", what, mapped, elements);
}

uint64_t checked_element_count(hid_t dataset, const std::string& what, int depth) {
  std::vector<hsize_t> dims = dataset_dims(dataset);
  if (std::find(dims.begin(), dims.end(), hsize_t{0}) != dims.end()) return 0;
  Handle type(check(H5Dget_type(dataset), "cannot read the type of " + what), H5Tclose);
  uint64_t element_bytes = H5Tget_size(type.get());  // a variable-length string counts its heap reference
  if (element_bytes == 0) fail("{}: cannot read the size of its values", what);
  uint64_t elements = 1;
  for (hsize_t d : dims) {
    if (elements > std::numeric_limits<uint64_t>::max() / element_bytes / d) {
      fail("{}: declares [{}] values, more than can be addressed (corrupt file?)", what, fmt::join(dims, ", "));
    }
    elements *= d;
  }
  Handle properties(check(H5Dget_create_plist(dataset), "cannot read the layout of " + what), H5Pclose);
  if (H5Pget_layout(properties.get()) == H5D_VIRTUAL) {
    check_virtual_sources(dataset, properties.get(), dims, elements, what, depth);
    return elements;
  }
  uint64_t declared = elements * element_bytes, stored = H5Dget_storage_size(dataset);
  // Compressed chunks may hold much more than they take: deflate packs at most 1032 bytes into one.
  constexpr uint64_t kMaxCompressionRatio = 1100;
  bool compressed = H5Pget_nfilters(properties.get()) > 0;
  uint64_t limit = !compressed ? stored
                   : stored > std::numeric_limits<uint64_t>::max() / kMaxCompressionRatio ? std::numeric_limits<uint64_t>::max()
                                                                                          : stored * kMaxCompressionRatio;
  if (declared > limit) {
    fail("{}: declares [{}] values ({} bytes) but the file stores only {} bytes of them (truncated or corrupt file?)", what,
         fmt::join(dims, ", "), declared, stored);
  }
  return elements;
}

}  // namespace

size_t stored_element_count(hid_t dataset, const std::string& what) {
  return static_cast<size_t>(checked_element_count(dataset, what, 0));
}

Handle create_virtual_dataset(hid_t parent, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                              const std::vector<VirtualSource>& sources) {
  Handle space = simple_space(dims);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  for (const VirtualSource& source : sources) {
    if (source.rows == 0) continue;
    std::vector<hsize_t> source_dims = dims, start(dims.size(), 0);
    source_dims[0] = source.rows;
    start[0] = source.row;
    check_status(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, source_dims.data(), nullptr),
                 "cannot select rows of " + name);
    Handle source_space = simple_space(source_dims);
    check_status(H5Pset_virtual(properties.get(), space.get(), source.file.c_str(), source.dataset.c_str(),
                                source_space.get()),
                 fmt::format("cannot map rows of {} to {}:{}", name, source.file, source.dataset));
  }
  H5Sselect_all(space.get());
  return Handle(check(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
                      "cannot create virtual dataset " + name),
                H5Dclose);
}

namespace {
// The file-space selection and matching memory space of rows [row, row + rows).
std::pair<Handle, Handle> row_selection(hid_t dataset, hsize_t row, hsize_t rows) {
  std::vector<hsize_t> dims = dataset_dims(dataset);
  if (dims.empty() || row + rows > dims[0]) {
    fail("rows [{}, {}) are outside a dataset of {} rows", row, row + rows, dims.empty() ? 0 : dims[0]);
  }
  Handle file_space(check(H5Dget_space(dataset), "cannot select rows"), H5Sclose);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = row;
  count[0] = rows;
  check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
               "cannot select rows");
  return {std::move(file_space), simple_space(count)};
}
}  // namespace

void write_rows(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t rows, const void* data) {
  if (rows == 0) return;
  auto [file_space, memory_space] = row_selection(dataset, row, rows);
  check_status(H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot write rows");
}

void read_rows(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t rows, void* data) {
  if (rows == 0) return;
  auto [file_space, memory_space] = row_selection(dataset, row, rows);
  check_status(H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot read rows");
}

void write_string_dataset(hid_t parent, const std::string& name, const std::vector<std::string>& values) {
  Handle type = utf8_string_type();
  Handle space = simple_space({values.size()});
  Handle dataset(check(H5Dcreate2(parent, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       "cannot create dataset " + name),
                 H5Dclose);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  if (!values.empty()) {
    check_status(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()),
                 "cannot write dataset " + name);
  }
}

std::vector<std::string> read_string_dataset(hid_t dataset) { return read_strings(dataset, false, "string dataset"); }

void set_attribute(hid_t object, const std::string& name, const std::string& value) {
  delete_attribute_if_present(object, name);
  Handle type = utf8_string_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(check(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create attribute " + name),
                   H5Aclose);
  const char* pointer = value.c_str();
  check_status(H5Awrite(attribute.get(), type.get(), &pointer), "cannot write attribute " + name);
}

void set_attribute(hid_t object, const std::string& name, int64_t value) {
  if (H5Aexists(object, name.c_str()) > 0) {
    // Overwrite in place: the object header keeps its layout.
    Handle attribute = open_attribute(object, name);
    Handle space(check(H5Aget_space(attribute.get()), "attribute " + name), H5Sclose);
    Handle type(check(H5Aget_type(attribute.get()), "attribute " + name), H5Tclose);
    if (H5Sget_simple_extent_npoints(space.get()) == 1 && H5Tget_class(type.get()) == H5T_INTEGER) {
      check_status(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), "cannot write attribute " + name);
      return;
    }
  }
  delete_attribute_if_present(object, name);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(check(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create attribute " + name),
                   H5Aclose);
  check_status(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), "cannot write attribute " + name);
}

void set_attribute(hid_t object, const std::string& name, const std::vector<int64_t>& values) {
  delete_attribute_if_present(object, name);
  Handle space = simple_space({values.size()});
  Handle attribute(check(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create attribute " + name),
                   H5Aclose);
  if (!values.empty()) check_status(H5Awrite(attribute.get(), H5T_NATIVE_INT64, values.data()), "cannot write " + name);
}

void set_attribute(hid_t object, const std::string& name, const std::vector<std::string>& values) {
  delete_attribute_if_present(object, name);
  Handle type = utf8_string_type();
  Handle space = simple_space({values.size()});
  Handle attribute(check(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create attribute " + name),
                   H5Aclose);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  if (!values.empty()) check_status(H5Awrite(attribute.get(), type.get(), pointers.data()), "cannot write " + name);
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

std::optional<std::string> get_string_attribute(hid_t object, const std::string& name) {
  if (!has_attribute(object, name)) return std::nullopt;
  Handle attribute = open_attribute(object, name);
  std::vector<std::string> values = read_strings(attribute.get(), true, "attribute " + name);
  if (values.size() != 1) fail("attribute {} holds {} strings, expected one", name, values.size());
  return values[0];
}

std::optional<int64_t> get_int_attribute(hid_t object, const std::string& name) {
  auto values = get_int_list_attribute(object, name);
  if (!values) return std::nullopt;
  if (values->size() != 1) fail("attribute {} holds {} values, expected one", name, values->size());
  return (*values)[0];
}

std::optional<std::vector<int64_t>> get_int_list_attribute(hid_t object, const std::string& name) {
  if (!has_attribute(object, name)) return std::nullopt;
  Handle attribute = open_attribute(object, name);
  Handle type(check(H5Aget_type(attribute.get()), "attribute " + name), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) fail("attribute {} is not an integer", name);
  Handle space(check(H5Aget_space(attribute.get()), "attribute " + name), H5Sclose);
  hssize_t count = H5Sget_simple_extent_npoints(space.get());
  std::vector<int64_t> values(static_cast<size_t>(std::max<hssize_t>(count, 0)));
  if (!values.empty()) check_status(H5Aread(attribute.get(), H5T_NATIVE_INT64, values.data()), "cannot read " + name);
  return values;
}

std::optional<std::vector<std::string>> get_string_list_attribute(hid_t object, const std::string& name) {
  if (!has_attribute(object, name)) return std::nullopt;
  Handle attribute = open_attribute(object, name);
  return read_strings(attribute.get(), true, "attribute " + name);
}

void flush(hid_t file) { check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush the HDF5 file"); }

}  // namespace probekit::hdf5
