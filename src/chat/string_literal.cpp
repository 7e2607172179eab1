#include "chat/string_literal.h"

#include <charconv>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace probekit::chat {

namespace {

// Reads `digits` hex digits at `at`; false when they are not all there.
bool read_hex(std::string_view source, size_t at, size_t digits, char32_t& value) {
  if (at + digits > source.size()) return false;
  uint32_t parsed = 0;
  const char* end = source.data() + at + digits;
  auto result = std::from_chars(source.data() + at, end, parsed, 16);
  value = parsed;
  return result.ec == std::errc() && result.ptr == end;
}

char simple_escape(char c) {
  switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'a': return '\a';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'v': return '\v';
    case '\\': return '\\';
    case '\'': return '\'';
    case '"': return '"';
    default: return 0;
  }
}

// Decodes the escape whose letter is at source[at] into `out`; returns the index past it.
size_t decode_escape(std::string_view source, size_t at, std::string& out) {
  char c = source[at];
  if (char simple = simple_escape(c)) {
    out += simple;
    return at + 1;
  }
  if (c == '\n') return at + 1;  // a backslash before a newline joins the lines
  size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
  char32_t value = 0;
  if (digits > 0 && read_hex(source, at + 1, digits, value)) {
    tokenizer::append_utf8(out, value);
    return at + 1 + digits;
  }
  if (c >= '0' && c <= '7') {
    size_t end = at;
    while (end < source.size() && end < at + 3 && source[end] >= '0' && source[end] <= '7') {
      value = value * 8 + static_cast<char32_t>(source[end] - '0');
      end++;
    }
    tokenizer::append_utf8(out, value);
    return end;
  }
  out += '\\';
  return at;
}

}  // namespace

std::string read_string_literal(std::string_view source, size_t start, size_t& end) {
  char quote = source[start];
  std::string value;
  for (size_t at = start + 1; at < source.size();) {
    char c = source[at];
    if (c == quote) {
      end = at + 1;
      return value;
    }
    if (c == '\\' && at + 1 < source.size()) {
      at = decode_escape(source, at + 1, value);
      continue;
    }
    value += c;
    at++;
  }
  end = 0;
  return {};
}

}  // namespace probekit::chat
