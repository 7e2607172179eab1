#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json.h"

namespace probekit::safetensors {

namespace {

// Headers of real checkpoints are a few hundred kilobytes; the reference library caps them at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeName {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},  {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4}, {DType::kI16, "I16", 2},  {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
};

DType parse_dtype(const std::string& name, const std::string& tensor, const std::string& source) {
  for (const auto& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  fail("{}: tensor '{}' has unsupported dtype '{}' (supported: F64, F32, F16, BF16, F8_E4M3, I64, I32, I16, I8, U8, BOOL)",
       source, tensor, name);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Multiplies with overflow detection; false if the product exceeds uint64.
bool checked_multiply(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

TensorInfo parse_tensor_entry(const std::string& name, const Json& entry, uint64_t data_start, uint64_t data_size,
                              const std::string& source) {
  if (!entry.is_object()) fail("{}: header entry '{}' is not an object", source, name);
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) fail("{}: tensor '{}' has no string 'dtype'", source, name);
  if (shape_it == entry.end() || !shape_it->is_array()) fail("{}: tensor '{}' has no 'shape' list", source, name);
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    fail("{}: tensor '{}' needs 'data_offsets' [begin, end]", source, name);
  }
  TensorInfo info;
  info.name = name;
  info.dtype = parse_dtype(dtype_it->get<std::string>(), name, source);
  uint64_t elements = 1;
  for (const Json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) fail("{}: tensor '{}' has a shape entry that is not a non-negative integer", source, name);
    uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !checked_multiply(elements, d, &elements)) {
      fail("{}: tensor '{}' has a shape too large to address", source, name);
    }
    info.shape.push_back(static_cast<int64_t>(d));
  }
  const Json& begin = (*offsets_it)[0];
  const Json& end = (*offsets_it)[1];
  if (!begin.is_number_unsigned() || !end.is_number_unsigned()) {
    fail("{}: tensor '{}' has data_offsets that are not non-negative integers", source, name);
  }
  uint64_t b = begin.get<uint64_t>(), e = end.get<uint64_t>();
  if (b > e || e > data_size) {
    fail("{}: tensor '{}' has data_offsets [{}, {}] outside the {} bytes of data (file truncated?)", source, name, b, e,
         data_size);
  }
  uint64_t expected = 0;
  if (!checked_multiply(elements, dtype_size(info.dtype), &expected) || expected != e - b) {
    fail("{}: tensor '{}' is {} {} of shape [{}] = {} bytes, but its data_offsets span {} bytes", source, name, elements,
         dtype_name(info.dtype), fmt::join(info.shape, ", "), expected, e - b);
  }
  info.data_begin = data_start + b;
  info.data_end = data_start + e;
  return info;
}

}  // namespace

size_t dtype_size(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

std::string dtype_name(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Header parse_header(const uint8_t* bytes, size_t size, const std::string& source) {
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", source, size);
  uint64_t header_size = read_u64_le(bytes);
  if (header_size > kMaxHeaderBytes) {
    fail("{}: header length {} exceeds the {} byte limit (corrupt file?)", source, header_size, kMaxHeaderBytes);
  }
  if (header_size > size - 8) {
    fail("{}: header length {} runs past the end of the {}-byte file (truncated?)", source, header_size, size);
  }
  std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_size);
  Json header;
  try {
    header = Json::parse(header_text.begin(), header_text.end());
  } catch (const Json::exception& e) {
    fail("{}: the header is not valid JSON: {}", source, e.what());
  }
  if (!header.is_object()) fail("{}: the header is not a JSON object", source);

  uint64_t data_start = 8 + header_size;
  uint64_t data_size = size - data_start;
  Header result;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail("{}: __metadata__ is not an object", source);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("{}: __metadata__ value '{}' is not a string", source, m.key());
        result.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    result.tensors.push_back(parse_tensor_entry(it.key(), *it, data_start, data_size, source));
  }
  std::sort(result.tensors.begin(), result.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  for (size_t i = 1; i < result.tensors.size(); ++i) {
    const TensorInfo& previous = result.tensors[i - 1];
    const TensorInfo& current = result.tensors[i];
    if (current.data_begin < previous.data_end) {
      fail("{}: tensors '{}' and '{}' overlap in the data section", source, previous.name, current.name);
    }
  }
  return result;
}

File::File(const std::string& path) : mapped_(path) {
  header_ = parse_header(mapped_.data(), mapped_.size(), path);
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* File::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

std::optional<uint64_t> File::offset_of(const void* bytes, size_t count) const {
  const auto base = reinterpret_cast<uintptr_t>(mapped_.data());
  const auto at = reinterpret_cast<uintptr_t>(bytes);
  if (base == 0 || at < base || count > mapped_.size() || at - base > mapped_.size() - count) return std::nullopt;
  return at - base;
}

const TensorInfo& File::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail("{}: no tensor named '{}'", path(), name);
  return *info;
}

std::string serialize(const std::vector<TensorData>& tensors, const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorData& t : tensors) {
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    if (static_cast<uint64_t>(elements) * dtype_size(t.dtype) != t.nbytes) {
      fail_input("safetensors: tensor '{}' has {} bytes, expected {} for shape [{}] {}", t.name, t.nbytes,
                 static_cast<uint64_t>(elements) * dtype_size(t.dtype), fmt::join(t.shape, ", "), dtype_name(t.dtype));
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string header_text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header_text.size() + offset);
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  out += header_text;
  for (const TensorData& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
  return out;
}

void write_file(const std::string& path, const std::vector<TensorData>& tensors,
                const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize(tensors, metadata));
}

}  // namespace probekit::safetensors
