// NumPy's .npz files (a zip archive of .npy arrays, as np.savez and np.savez_compressed write them), read without
// Python: Gemma Scope publishes its sparse autoencoders this way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace probekit::npz {

/// The element types read: NumPy's little-endian floats and integers.
enum class DType { kF16, kF32, kF64, kI32, kI64 };

size_t dtype_size(DType dtype);

/// One array: its little-endian bytes in C order.
struct Array {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
};

/// Every array of the archive by name (the member's name without ".npy"). Throws naming the file and the member for
/// anything not read: another zip compression than stored or deflate, a Fortran-order or big-endian array, an
/// unknown dtype, a truncated or inconsistent archive.
std::map<std::string, Array> read_file(const std::string& path);

/// The same, of an archive held in memory; `source` names it in errors.
std::map<std::string, Array> read_bytes(const uint8_t* data, size_t size, const std::string& source);

}  // namespace probekit::npz
