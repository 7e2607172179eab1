#include "common/utf8_text.h"

namespace probekit {
namespace {

// The number of bytes of the longest valid prefix of a UTF-8 sequence at `s` (0 when `s[0]` cannot start
// one), and whether the whole sequence is there. Ranges per the Unicode standard, table 3-7.
struct SequenceCheck {
  size_t valid_bytes;
  bool complete;
};

SequenceCheck check_sequence(const unsigned char* s, size_t available) {
  unsigned char lead = s[0];
  size_t length;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0, false};
  }
  size_t valid = 1;
  if (valid < available && s[1] >= second_min && s[1] <= second_max) {
    valid = 2;
    while (valid < length && valid < available && (s[valid] & 0xC0) == 0x80) valid++;
  }
  return {valid, valid == length};
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    SequenceCheck check = check_sequence(s + i, n - i);
    if (!check.complete) return false;
    i += check.valid_bytes;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0, n = bytes.size();
  while (i < n) {
    if (s[i] < 0x80) {
      out.push_back(static_cast<char>(s[i++]));
      continue;
    }
    SequenceCheck check = check_sequence(s + i, n - i);
    if (check.complete) {
      out.append(bytes.data() + i, check.valid_bytes);
      i += check.valid_bytes;
    } else {
      out.append("\xEF\xBF\xBD");
      i += check.valid_bytes == 0 ? 1 : check.valid_bytes;
    }
  }
  return out;
}

std::string_view without_byte_order_mark(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

std::string_view trimmed(std::string_view text) {
  constexpr std::string_view kBlank = " \t\r\n";
  const size_t begin = text.find_first_not_of(kBlank);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kBlank) - begin + 1);
}

}  // namespace probekit
