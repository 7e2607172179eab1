// Small RAII layer over the HDF5 C API: handles that close themselves, typed attribute and dataset helpers,
// and errors that name the file and the object instead of HDF5's own error stack.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace probekit::hdf5 {

/// An HDF5 identifier closed with the matching H5*close when it goes out of scope.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Once per process, before libhdf5 starts: turns off its automatic error printing (our exceptions carry the
/// context instead) and its cleanup at exit, which crashes in libhdf5 1.10 on a file whose close failed to
/// flush (a full disk); every handle is closed by its owner anyway.
void prepare_library();

Handle create_file(const std::string& path);
Handle open_file(const std::string& path, bool writable);
Handle create_group(hid_t parent, const std::string& name);
/// Opens a group; nullopt if it does not exist.
std::optional<Handle> open_group(hid_t parent, const std::string& name);
/// Opens a dataset; nullopt if it does not exist.
std::optional<Handle> open_dataset(hid_t parent, const std::string& name);
bool exists(hid_t parent, const std::string& name);
/// The names of a group's members, in name order.
std::vector<std::string> member_names(hid_t group);

/// How a dataset is stored.
struct Storage {
  std::vector<hsize_t> chunk;   // chunk shape
  bool gzip = false;            // shuffle + deflate
  // Allocate every chunk at creation and never write fill values: later writes then touch raw data only,
  // never the file's metadata, so a process killed mid-write leaves a readable file.
  bool allocate_now = false;
};

/// Creates a chunked dataset of `dims` of a file type.
Handle create_dataset(hid_t parent, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                      const Storage& storage);
std::vector<hsize_t> dataset_dims(hid_t dataset);

/// Rows [row, row + rows) of a virtual dataset are the whole of dataset `dataset` in file `file` (a path
/// relative to the virtual file's directory, where HDF5 looks first, so the files can move together).
struct VirtualSource {
  std::string file, dataset;
  hsize_t row = 0, rows = 0;
};
/// Creates a virtual dataset of `dims` (rows first) over `sources`, which must cover its rows: nothing is copied.
Handle create_virtual_dataset(hid_t parent, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                              const std::vector<VirtualSource>& sources);

/// The number of values a dataset holds, once the file is known to store them: a file of a few kilobytes can
/// declare [2^40, 2^40] values and leave its chunks unwritten, and an interrupted writer leaves chunks
/// missing that would read back as zeros. A virtual dataset stores nothing itself: each of its source files
/// must exist and store its source dataset whole, in the shape the mapping expects, and the mappings must
/// cover every value (HDF5 reads a missing source as fill values, silently). Throws naming `what` otherwise.
size_t stored_element_count(hid_t dataset, const std::string& what);

/// Writes rows [row, row + rows) of a 1-D or 2-D dataset.
void write_rows(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t rows, const void* data);
/// Reads rows [row, row + rows) of a 1-D or 2-D dataset.
void read_rows(hid_t dataset, hid_t memory_type, hsize_t row, hsize_t rows, void* data);

void write_string_dataset(hid_t parent, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> read_string_dataset(hid_t dataset);

void set_attribute(hid_t object, const std::string& name, const std::string& value);
void set_attribute(hid_t object, const std::string& name, int64_t value);
void set_attribute(hid_t object, const std::string& name, const std::vector<int64_t>& values);
void set_attribute(hid_t object, const std::string& name, const std::vector<std::string>& values);

bool has_attribute(hid_t object, const std::string& name);
std::optional<std::string> get_string_attribute(hid_t object, const std::string& name);
std::optional<int64_t> get_int_attribute(hid_t object, const std::string& name);
std::optional<std::vector<int64_t>> get_int_list_attribute(hid_t object, const std::string& name);
std::optional<std::vector<std::string>> get_string_list_attribute(hid_t object, const std::string& name);

/// Flushes a file's buffers to disk.
void flush(hid_t file);

}  // namespace probekit::hdf5
