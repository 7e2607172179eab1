// GGUF files (version 3), the container llama.cpp reads: a header, typed metadata key/values, tensor records and
// the tensors' data, each aligned. Written from the format's documentation (ggml's docs/gguf.md): little-endian,
// strings as a u64 length and bytes, dimensions innermost first, every tensor padded to the alignment (32 unless
// general.alignment says otherwise), the last one too. Only what steering's control vectors need is read and
// written: every metadata type is read (nested arrays refused, as ggml refuses them), float tensors (F32, F16, BF16)
// are read as float32 and F32 tensors written. Every length, count and offset of a file is checked before use.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"

namespace probekit::gguf {

/// A metadata value's type id, as the format numbers them.
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12
};

/// One metadata entry: its type (for an array, its elements') and value (numbers, bools, strings, or a list).
struct Metadata {
  std::string key;
  ValueType type = ValueType::kString;
  bool array = false;
  Json value;
};

/// A float tensor, its shape outermost first (as numpy and safetensors give it), values in row-major order.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct File {
  std::vector<Metadata> metadata;
  std::vector<Tensor> tensors;

  /// The entry of `key`, or null.
  const Metadata* find(const std::string& key) const;
};

/// Reads a GGUF file; anything malformed, or a tensor of a type other than F32, F16 and BF16, throws naming the
/// file and what is wrong (the key, the tensor, the offset).
File read_file(const std::string& path);
/// The same from bytes in memory; `where` names them in errors.
File parse(const std::string& bytes, const std::string& where);

/// Writes `file` (F32 tensors; scalar, string and array metadata) atomically.
void write_file(const std::string& path, const File& file);
/// The bytes write_file writes.
std::string serialize(const File& file);

}  // namespace probekit::gguf
