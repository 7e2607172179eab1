// File helpers: read-only memory maps for large inputs (weights, tokenizer.json), whole-file reads, and
// writes that never leave a half-written file under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace probekit {

/// A read-only memory map of a whole file; throws naming the file if it cannot be opened.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

/// Opens an input file for reading without ever blocking: a FIFO, a device, a directory or a socket (also
/// behind a symlink) is refused naming what it is, where a plain open would wait forever for a FIFO's writer.
/// Returns the descriptor (close it); throws naming the file.
int open_input_file(const std::string& path);

/// Whether bytes [begin, end) of the open file `fd` are all in the page cache (false when unknown: off Linux, or
/// where the kernel does not say).
bool in_page_cache(int fd, uint64_t begin, uint64_t end);

/// Throws unless `path` is a regular file (or a symlink to one), naming what it is instead; for inputs that
/// a library opens by name (HDF5, streams).
void require_input_file(const std::string& path);

/// Reads a whole file into a string; throws naming the file.
std::string read_file(const std::string& path);
/// The same for a file that must be small (a JSON or a token file read into memory): one larger than `max_bytes`
/// is refused naming it and the bound, before more than that is read.
std::string read_file(const std::string& path, uint64_t max_bytes);

/// Reads an open descriptor (a file, a pipe, standard input) to its end; throws naming `name`, also when it holds
/// more than `max_bytes`.
std::string read_to_end(int fd, const std::string& name, uint64_t max_bytes = UINT64_MAX);

/// An input read whole, which may have been one that can be read only once.
struct InputBytes {
  std::string bytes;
  bool from_stream = false;  // a pipe or FIFO: reading it again gives nothing
};
/// Reads a regular file, or a pipe or FIFO to its end (`<(zcat data.jsonl.gz)`, /dev/stdin, a named pipe, whose
/// writer is waited for as `cat` waits). A directory, a device or a socket is refused naming what it is.
InputBytes read_input_once(const std::string& path);

/// An input flag's value read whole: "-" is standard input (refused when it is a terminal, naming `flag`), anything
/// else as read_input_once reads it.
InputBytes read_flag_input(const std::string& path, const std::string& flag);

/// How messages name an input flag's value: "<stdin>" for "-" (as Python names it), else the path.
std::string input_name(const std::string& path);

/// Writes `contents` to `path` through a temporary file in the same directory and a rename, so readers
/// see either the old file or the complete new one.
void write_file_atomic(const std::string& path, std::string_view contents);

/// True when `path` names an existing regular file.
bool is_regular_file(const std::string& path);

// Directory helpers over POSIX calls. The project avoids std::filesystem: the LibTorch 2.x wheels export
// their own, incompatible copies of its symbols, and calls from our code bound to them crash.

/// True when anything exists at `path`.
bool path_exists(const std::string& path);
/// True when `path` is a directory.
bool is_directory(const std::string& path);
/// Creates a directory and its missing parents (mkdir -p); throws naming the path.
void make_directories(const std::string& path);
/// Removes a file or a directory tree if present (rm -rf); throws naming what could not be removed.
void remove_tree(const std::string& path);
/// Copies a file, or a directory tree, to `to`.
void copy_tree(const std::string& from, const std::string& to);
/// Renames `from` to `to` (same file system), replacing `to`; throws naming both.
void rename_path(const std::string& from, const std::string& to);
/// Size of a regular file in bytes.
uint64_t file_size(const std::string& path);
/// The entries of a directory (without "." and ".."), sorted.
std::vector<std::string> list_directory(const std::string& path);
/// $TMPDIR, or /tmp.
std::string temp_directory();
/// The directory part of a path ("" when there is none).
std::string parent_directory(const std::string& path);
/// The absolute, symlink-free path of an existing file or directory; throws naming it when it does not exist.
std::string absolute_path(const std::string& path);
/// The path of `target` relative to the directory `from` (both absolute): "../b/c" from "/x/a" to "/x/b/c".
std::string relative_path(const std::string& from, const std::string& target);

}  // namespace probekit
