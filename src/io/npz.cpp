#include "io/npz.h"

#include <zlib.h>

#include <cstring>
#include <limits>
#include <string_view>

#include "common/error.h"
#include "common/files.h"

namespace probekit::npz {

namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64Locator = 0x07064b50, kZip64End = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50, kLocalHeader = 0x04034b50;

// Little-endian reads, bounds checked against the archive.
struct Reader {
  const uint8_t* data;
  size_t size;
  const std::string& source;

  void check(uint64_t at, uint64_t bytes) const {
    if (at > size || bytes > size - at) fail("{}: truncated zip archive (a field at byte {} past its {} bytes)", source, at, size);
  }
  uint64_t read(size_t at, size_t bytes) const {  // bytes <= 8
    check(at, bytes);
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(data[at + i]) << (8 * i);
    return value;
  }
  uint32_t u32(size_t at) const { return static_cast<uint32_t>(read(at, 4)); }
  uint16_t u16(size_t at) const { return static_cast<uint16_t>(read(at, 2)); }
};

// One member as the central directory lists it.
struct Member {
  std::string name;
  uint16_t method = 0;
  uint64_t compressed = 0, size = 0, local_header = 0;
};

// Where the central directory starts and how many entries it has (ZIP64 where the classic fields overflow).
std::pair<uint64_t, uint64_t> central_directory(const Reader& r) {
  if (r.size < 22) fail("{}: not a zip archive (.npz): {} bytes", r.source, r.size);
  size_t end = r.size - 22;
  const size_t lowest = r.size > 22 + 65535 ? r.size - 22 - 65535 : 0;
  while (r.u32(end) != kEndOfDirectory) {
    if (end == lowest) fail("{}: not a zip archive (.npz): no end of central directory", r.source);
    --end;
  }
  uint64_t entries = r.u16(end + 10), offset = r.u32(end + 16);
  if ((entries == 0xFFFF || offset == 0xFFFFFFFF) && end >= 20 && r.u32(end - 20) == kZip64Locator) {
    const uint64_t zip64_end = r.read(end - 20 + 8, 8);
    if (r.u32(zip64_end) != kZip64End) fail("{}: broken ZIP64 end of central directory", r.source);
    entries = r.read(zip64_end + 32, 8);
    offset = r.read(zip64_end + 48, 8);
  }
  return {offset, entries};
}

// A directory entry's sizes and offset, from its ZIP64 extra field where the classic ones hold 0xFFFFFFFF.
void zip64_sizes(const Reader& r, size_t extra, size_t extra_length, Member& m) {
  for (size_t at = extra; at + 4 <= extra + extra_length;) {
    const uint16_t id = r.u16(at), length = r.u16(at + 2);
    if (id == 0x0001) {
      size_t field = at + 4;
      for (uint64_t* value : {&m.size, &m.compressed, &m.local_header}) {
        if (*value == 0xFFFFFFFF) {
          *value = r.read(field, 8);
          field += 8;
        }
      }
      return;
    }
    at += 4 + length;
  }
}

std::vector<Member> members(const Reader& r) {
  auto [at, entries] = central_directory(r);
  std::vector<Member> out;
  for (uint64_t i = 0; i < entries; ++i) {
    if (r.u32(at) != kDirectoryEntry) fail("{}: broken zip central directory (entry {})", r.source, i);
    Member m;
    m.method = r.u16(at + 10);
    m.compressed = r.u32(at + 20);
    m.size = r.u32(at + 24);
    const size_t name_length = r.u16(at + 28), extra_length = r.u16(at + 30), comment_length = r.u16(at + 32);
    m.local_header = r.u32(at + 42);
    r.check(at + 46, name_length);
    m.name.assign(reinterpret_cast<const char*>(r.data + at + 46), name_length);
    zip64_sizes(r, at + 46 + name_length, extra_length, m);
    out.push_back(m);
    at += 46 + name_length + extra_length + comment_length;
  }
  return out;
}

// The member's bytes, inflated where deflated.
std::vector<uint8_t> member_bytes(const Reader& r, const Member& m) {
  if (r.u32(m.local_header) != kLocalHeader) fail("{}: member '{}': broken local header", r.source, m.name);
  const size_t start = m.local_header + 30 + r.u16(m.local_header + 26) + r.u16(m.local_header + 28);
  r.check(start, 0);
  if (m.compressed > r.size - start) fail("{}: member '{}' runs past the archive's end (truncated?)", r.source, m.name);
  // Deflate shrinks at most about 1032:1; a larger size is a broken header, not an allocation to attempt.
  if (m.size > (m.compressed + 1) * 1100) fail("{}: member '{}' claims {} bytes from {}", r.source, m.name, m.size, m.compressed);
  const uint8_t* begin = r.data + start;
  if (m.method == 0) {
    if (m.size != m.compressed) fail("{}: stored member '{}' has sizes {} and {}", r.source, m.name, m.size, m.compressed);
    return {begin, begin + m.compressed};
  }
  if (m.method != 8) fail("{}: member '{}' is compressed with zip method {} (read: stored, deflate)", r.source, m.name, m.method);
  std::vector<uint8_t> out(m.size);
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) fail("{}: zlib could not start", r.source);
  // zlib counts in 32-bit units: the member is fed and drained in pieces.
  uint64_t in_done = 0, out_done = 0;
  int status = Z_OK;
  while (status == Z_OK) {
    stream.next_in = const_cast<uint8_t*>(begin + in_done);
    stream.avail_in = static_cast<uInt>(std::min<uint64_t>(m.compressed - in_done, std::numeric_limits<uInt>::max()));
    stream.next_out = out.data() + out_done;
    stream.avail_out = static_cast<uInt>(std::min<uint64_t>(m.size - out_done, std::numeric_limits<uInt>::max()));
    const uInt in_before = stream.avail_in, out_before = stream.avail_out;
    status = inflate(&stream, Z_NO_FLUSH);
    in_done += in_before - stream.avail_in;
    out_done += out_before - stream.avail_out;
    if (status == Z_OK && in_before == stream.avail_in && out_before == stream.avail_out) status = Z_BUF_ERROR;
  }
  inflateEnd(&stream);
  if (status != Z_STREAM_END || out_done != m.size) fail("{}: member '{}' does not inflate to its {} bytes", r.source, m.name, m.size);
  return out;
}

// The value of `key` in the .npy header's Python dict literal: "'descr': '<f4', 'fortran_order': False, ...".
std::string header_field(const std::string& header, const std::string& key, const std::string& where) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) fail("{}: the .npy header has no '{}'", where, key);
  size_t begin = header.find(':', at) + 1;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  const char open = header[begin];
  const size_t end = open == '(' ? header.find(')', begin) + 1
                     : open == '\'' ? header.find('\'', begin + 1) + 1
                                    : header.find_first_of(",}", begin);
  return header.substr(begin, end - begin);
}

DType parse_descr(const std::string& descr, const std::string& where) {
  static const std::map<std::string, DType> known = {{"'<f2'", DType::kF16}, {"'<f4'", DType::kF32},
                                                     {"'<f8'", DType::kF64}, {"'<i4'", DType::kI32},
                                                     {"'<i8'", DType::kI64}};
  auto found = known.find(descr);
  if (found == known.end()) fail("{}: dtype {} is not read (read: little-endian f2, f4, f8, i4, i8)", where, descr);
  return found->second;
}

std::vector<int64_t> parse_shape(const std::string& shape, const std::string& where) {
  std::vector<int64_t> out;
  std::string number;
  for (char c : shape) {
    if (c >= '0' && c <= '9') {
      number += c;
    } else if (!number.empty()) {
      if (number.size() > 15) fail("{}: implausible shape {}", where, shape);
      out.push_back(std::stoll(number));
      number.clear();
    }
  }
  return out;
}

Array parse_npy(const std::vector<uint8_t>& bytes, const std::string& where) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) fail("{}: not a .npy array", where);
  const int major = bytes[6];
  const size_t length_bytes = major == 1 ? 2 : 4, start = 8 + length_bytes;
  if (bytes.size() < start) fail("{}: truncated .npy header", where);
  size_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_length |= static_cast<size_t>(bytes[8 + i]) << (8 * i);
  if (header_length > bytes.size() - start) fail("{}: truncated .npy header", where);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + start), header_length);
  if (header_field(header, "fortran_order", where) != "False") fail("{}: Fortran-order arrays are not read", where);
  Array array;
  array.dtype = parse_descr(header_field(header, "descr", where), where);
  array.shape = parse_shape(header_field(header, "shape", where), where);
  const size_t data = start + header_length;
  uint64_t expected = dtype_size(array.dtype);
  for (int64_t d : array.shape) {
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) fail("{}: implausible shape", where);
  }
  if (bytes.size() - data != expected) {
    fail("{}: {} bytes of data for shape ({}) of {}-byte values, expected {}", where, bytes.size() - data,
         header_field(header, "shape", where), dtype_size(array.dtype), expected);
  }
  array.bytes.assign(bytes.begin() + static_cast<int64_t>(data), bytes.end());
  return array;
}

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 2;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: return 8;
  }
  return 0;
}

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::map<std::string, Array> read_bytes(const uint8_t* data, size_t size, const std::string& source) {
  const Reader reader{data, size, source};
  std::map<std::string, Array> arrays;
  for (const Member& m : members(reader)) {
    const std::string_view name(m.name);
    if (name.size() < 4 || name.substr(name.size() - 4) != ".npy") continue;
    arrays[std::string(name.substr(0, name.size() - 4))] =
        parse_npy(member_bytes(reader, m), source + ": " + m.name);
  }
  return arrays;
}

std::map<std::string, Array> read_file(const std::string& path) {
  const MappedFile file(path);
  return read_bytes(file.data(), file.size(), path);
}

}  // namespace probekit::npz
