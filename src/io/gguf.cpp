#include "io/gguf.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <set>
#include <limits>

#include "common/error.h"
#include "common/files.h"

namespace probekit::gguf {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;  // ggml's bound
constexpr uint32_t kMaxDimensions = 4;
enum TensorType : uint32_t { kTensorF32 = 0, kTensorF16 = 1, kTensorBF16 = 30 };

// A bounds-checked reader over the file's bytes (the host is little-endian, as the format).
class Cursor {
 public:
  Cursor(const std::string& bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  std::string string(const std::string& what) {
    const auto length = read<uint64_t>(what + "'s length");
    if (length > kMaxStringBytes) fail("{}: {} is {} bytes long, more than GGUF allows", where_, what, length);
    need(length, what);
    std::string text = bytes_.substr(position_, length);
    position_ += length;
    return text;
  }
  void need(uint64_t count, const std::string& what) const {
    if (count > bytes_.size() - position_) {
      fail("{}: {} at byte {} runs past the end of the file ({} bytes)", where_, what, position_, bytes_.size());
    }
  }
  uint64_t position() const { return position_; }
  const std::string& where() const { return where_; }

 private:
  const std::string& bytes_;
  const std::string& where_;
  uint64_t position_ = 0;
};

Json read_scalar(Cursor& in, ValueType type, const std::string& what) {
  switch (type) {
    case ValueType::kU8: return in.read<uint8_t>(what);
    case ValueType::kI8: return in.read<int8_t>(what);
    case ValueType::kU16: return in.read<uint16_t>(what);
    case ValueType::kI16: return in.read<int16_t>(what);
    case ValueType::kU32: return in.read<uint32_t>(what);
    case ValueType::kI32: return in.read<int32_t>(what);
    case ValueType::kF32: return in.read<float>(what);
    case ValueType::kBool: return in.read<uint8_t>(what) != 0;
    case ValueType::kString: return in.string(what);
    case ValueType::kU64: return in.read<uint64_t>(what);
    case ValueType::kI64: return in.read<int64_t>(what);
    case ValueType::kF64: return in.read<double>(what);
    case ValueType::kArray: break;
  }
  fail("{}: {} has the unknown value type {}", in.where(), what, static_cast<uint32_t>(type));
}

Metadata read_metadata(Cursor& in, size_t index) {
  Metadata entry;
  entry.key = in.string(fmt::format("metadata key {}", index));
  const std::string what = "metadata '" + entry.key + "'";
  entry.type = static_cast<ValueType>(in.read<uint32_t>(what + "'s type"));
  if (entry.type != ValueType::kArray) {
    entry.value = read_scalar(in, entry.type, what);
    return entry;
  }
  entry.array = true;
  entry.type = static_cast<ValueType>(in.read<uint32_t>(what + "'s element type"));
  if (entry.type == ValueType::kArray) fail("{}: {} is an array of arrays, which GGUF readers refuse", in.where(), what);
  const auto count = in.read<uint64_t>(what + "'s element count");
  in.need(count, what + "'s elements");  // each element takes a byte at least
  entry.value = Json::array();
  for (uint64_t i = 0; i < count; ++i) entry.value.push_back(read_scalar(in, entry.type, what));
  return entry;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign != 0 ? -magnitude : magnitude;
}

// A tensor record: its name, shape (outermost first), element count and where its data starts.
struct TensorRecord {
  Tensor tensor;
  uint32_t type = kTensorF32;
  uint64_t elements = 1, offset = 0;
};

TensorRecord read_tensor_record(Cursor& in, size_t index) {
  TensorRecord record;
  record.tensor.name = in.string(fmt::format("tensor {}'s name", index));
  const std::string what = "tensor '" + record.tensor.name + "'";
  const auto dims = in.read<uint32_t>(what + "'s dimension count");
  if (dims == 0 || dims > kMaxDimensions) fail("{}: {} has {} dimensions (1 to 4)", in.where(), what, dims);
  record.tensor.shape.assign(dims, 0);
  for (uint32_t d = 0; d < dims; ++d) {
    const auto size = in.read<uint64_t>(what + "'s dimension");
    if (size == 0 || size > (uint64_t{1} << 40) || record.elements > (uint64_t{1} << 40) / size) {
      fail("{}: {} has an impossible shape (dimension {} is {})", in.where(), what, d, size);
    }
    record.elements *= size;
    record.tensor.shape[dims - 1 - d] = static_cast<int64_t>(size);  // the file lists the innermost first
  }
  record.type = in.read<uint32_t>(what + "'s type");
  record.offset = in.read<uint64_t>(what + "'s offset");
  return record;
}

uint64_t element_bytes(uint32_t type, const std::string& where, const std::string& name) {
  if (type == kTensorF32) return 4;
  if (type == kTensorF16 || type == kTensorBF16) return 2;
  fail("{}: tensor '{}' has ggml type {}; only F32 (0), F16 (1) and BF16 (30) tensors are read", where, name, type);
}

void read_tensor_data(const std::string& bytes, uint64_t data_start, TensorRecord& record, const std::string& where) {
  const uint64_t width = element_bytes(record.type, where, record.tensor.name);
  const uint64_t size = record.elements * width;
  if (data_start > bytes.size() || record.offset > bytes.size() - data_start ||
      size > bytes.size() - data_start - record.offset) {
    fail("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file", where, record.tensor.name, size,
         record.offset);
  }
  const char* data = bytes.data() + data_start + record.offset;
  std::vector<float>& values = record.tensor.values;
  values.resize(record.elements);
  for (uint64_t i = 0; i < record.elements; ++i) {
    if (record.type == kTensorF32) {
      std::memcpy(&values[i], data + 4 * i, 4);
      continue;
    }
    uint16_t half;
    std::memcpy(&half, data + 2 * i, 2);
    if (record.type == kTensorF16) {
      values[i] = half_to_float(half);
    } else {
      const uint32_t bits = static_cast<uint32_t>(half) << 16;
      std::memcpy(&values[i], &bits, 4);
    }
  }
}

uint64_t alignment_of(const File& file, const std::string& where) {
  const Metadata* entry = file.find("general.alignment");
  if (entry == nullptr) return kDefaultAlignment;
  if (entry->type != ValueType::kU32 || entry->array) fail("{}: general.alignment must be a u32", where);
  const auto alignment = entry->value.get<uint64_t>();
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    fail("{}: general.alignment {} is not a power of two", where, alignment);
  }
  return alignment;
}

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace

const Metadata* File::find(const std::string& key) const {
  for (const Metadata& entry : metadata) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

File parse(const std::string& bytes, const std::string& where) {
  Cursor in(bytes, where);
  in.need(4, "the magic number");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) fail("{}: not a GGUF file (it does not start with GGUF)", where);
  in.read<uint32_t>("the magic number");
  const auto version = in.read<uint32_t>("the version");
  if (version != 2 && version != 3) fail("{}: GGUF version {} (versions 2 and 3 are read)", where, version);
  const auto tensor_count = in.read<uint64_t>("the tensor count");
  const auto metadata_count = in.read<uint64_t>("the metadata count");
  in.need(tensor_count, "the tensor records");
  in.need(metadata_count, "the metadata");
  File file;
  std::set<std::string> keys, names;
  for (uint64_t i = 0; i < metadata_count; ++i) {
    file.metadata.push_back(read_metadata(in, i));
    if (!keys.insert(file.metadata.back().key).second) fail("{}: metadata '{}' appears twice", where, file.metadata.back().key);
  }
  std::vector<TensorRecord> records;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    records.push_back(read_tensor_record(in, i));
    if (!names.insert(records.back().tensor.name).second) fail("{}: tensor '{}' appears twice", where, records.back().tensor.name);
  }
  const uint64_t data_start = align_up(in.position(), alignment_of(file, where));
  for (TensorRecord& record : records) {
    read_tensor_data(bytes, data_start, record, where);
    file.tensors.push_back(std::move(record.tensor));
  }
  return file;
}

File read_file(const std::string& path) { return parse(probekit::read_file(path), path); }

namespace {

// Appends a value's little-endian bytes.
template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_string(std::string& out, const std::string& text) {
  put<uint64_t>(out, text.size());
  out += text;
}

void put_scalar(std::string& out, ValueType type, const Json& value) {
  switch (type) {
    case ValueType::kU8: return put(out, value.get<uint8_t>());
    case ValueType::kI8: return put(out, value.get<int8_t>());
    case ValueType::kU16: return put(out, value.get<uint16_t>());
    case ValueType::kI16: return put(out, value.get<int16_t>());
    case ValueType::kU32: return put(out, value.get<uint32_t>());
    case ValueType::kI32: return put(out, value.get<int32_t>());
    case ValueType::kF32: return put(out, value.get<float>());
    case ValueType::kBool: return put<uint8_t>(out, value.get<bool>() ? 1 : 0);
    case ValueType::kString: return put_string(out, value.get<std::string>());
    case ValueType::kU64: return put(out, value.get<uint64_t>());
    case ValueType::kI64: return put(out, value.get<int64_t>());
    case ValueType::kF64: return put(out, value.get<double>());
    case ValueType::kArray: break;
  }
  fail_input("GGUF metadata: arrays of arrays are not written");
}

void put_metadata(std::string& out, const Metadata& entry) {
  put_string(out, entry.key);
  if (!entry.array) {
    put(out, static_cast<uint32_t>(entry.type));
    return put_scalar(out, entry.type, entry.value);
  }
  put(out, static_cast<uint32_t>(ValueType::kArray));
  put(out, static_cast<uint32_t>(entry.type));
  put<uint64_t>(out, entry.value.size());
  for (const Json& element : entry.value) put_scalar(out, entry.type, element);
}

}  // namespace

std::string serialize(const File& file) {
  std::string out(kMagic, 4);
  put(out, kVersion);
  put<uint64_t>(out, file.tensors.size());
  put<uint64_t>(out, file.metadata.size());
  for (const Metadata& entry : file.metadata) put_metadata(out, entry);
  const uint64_t alignment = alignment_of(file, "GGUF output");
  uint64_t offset = 0;
  for (const Tensor& tensor : file.tensors) {
    uint64_t elements = 1;
    for (int64_t d : tensor.shape) elements *= static_cast<uint64_t>(d);
    if (tensor.shape.empty() || elements != tensor.values.size()) {
      fail_input("GGUF output: tensor '{}' holds {} values for its shape", tensor.name, tensor.values.size());
    }
    put_string(out, tensor.name);
    put<uint32_t>(out, static_cast<uint32_t>(tensor.shape.size()));
    for (auto d = tensor.shape.rbegin(); d != tensor.shape.rend(); ++d) put<uint64_t>(out, static_cast<uint64_t>(*d));
    put<uint32_t>(out, kTensorF32);
    put<uint64_t>(out, offset);
    offset += align_up(4 * tensor.values.size(), alignment);
  }
  out.resize(align_up(out.size(), alignment), '\0');
  for (const Tensor& tensor : file.tensors) {
    out.append(reinterpret_cast<const char*>(tensor.values.data()), 4 * tensor.values.size());
    out.resize(align_up(out.size(), alignment), '\0');
  }
  return out;
}

void write_file(const std::string& path, const File& file) { write_file_atomic(path, serialize(file)); }

}  // namespace probekit::gguf
