// The safetensors format, read through a memory map with every header field validated before use (sizes,
// offsets inside the file, no overlap, byte length consistent with dtype and shape), and written atomically.
// https://github.com/huggingface/safetensors: 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw little-endian data.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/files.h"

namespace probekit::safetensors {

// kF8E4M3: float8_e4m3fn (fine-grained FP8 checkpoints), read as raw bytes and decoded by the weight loader.
enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kI64, kI32, kI16, kI8, kU8, kBool };

/// Bytes per element of a dtype.
size_t dtype_size(DType dtype);
/// The header's name of a dtype ("F32", "BF16", ...).
std::string dtype_name(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte offset into the file (header included)
  uint64_t data_end = 0;

  int64_t numel() const;
  uint64_t nbytes() const { return data_end - data_begin; }
};

/// The validated header of a safetensors file held in memory.
struct Header {
  std::vector<TensorInfo> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

/// Parses and validates the header of a whole safetensors file in memory; `source` names it in errors.
Header parse_header(const uint8_t* bytes, size_t size, const std::string& source);

/// A memory-mapped, validated safetensors file.
class File {
 public:
  explicit File(const std::string& path);

  const std::string& path() const { return mapped_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// The tensor named `name`; throws naming the tensor and the file if absent.
  const TensorInfo& at(std::string_view name) const;
  /// Pointer to a tensor's bytes inside the map.
  const uint8_t* data(const TensorInfo& tensor) const { return mapped_.data() + tensor.data_begin; }
  /// The offset in the file of the `count` bytes at `bytes` when they lie inside its map; nullopt otherwise.
  std::optional<uint64_t> offset_of(const void* bytes, size_t count) const;

 private:
  MappedFile mapped_;
  Header header_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

/// One tensor to write: raw little-endian bytes of numel(shape) * dtype_size(dtype).
struct TensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

/// Serializes tensors and string metadata to the safetensors byte layout.
std::string serialize(const std::vector<TensorData>& tensors, const std::map<std::string, std::string>& metadata);

/// Writes a safetensors file atomically (temporary file + rename).
void write_file(const std::string& path, const std::vector<TensorData>& tensors,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace probekit::safetensors
