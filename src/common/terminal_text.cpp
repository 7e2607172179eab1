#include "common/terminal_text.h"

#include <fmt/format.h>

namespace probekit {

namespace {

// The code point whose UTF-8 starts at text[i] (a stray continuation byte or a cut sequence as itself).
char32_t code_point_at(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (length == 1 || i + length > text.size()) return lead;
  char32_t cp = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return cp;
}

bool is_wide(char32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
         (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) || (cp >= 0x1F680 && cp <= 0x1F6FF) ||
         (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x1FA70 && cp <= 0x1FAFF) || (cp >= 0x20000 && cp <= 0x3FFFD) ||
         cp == 0x26A1 || cp == 0x2705 || cp == 0x274C || cp == 0x2B50;
}

}  // namespace

size_t code_point_columns(std::string_view text, size_t i) {
  if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) return 0;
  return is_wide(code_point_at(text, i)) ? 2 : 1;
}

size_t display_columns(std::string_view text) {
  size_t used = 0;
  for (size_t i = 0; i < text.size(); ++i) used += code_point_columns(text, i);
  return used;
}

std::string terminal_text(std::string_view text, bool keep_line_breaks) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool line_break = c == '\n' || c == '\t';
    if ((c < 0x20 && !(keep_line_breaks && line_break)) || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // U+0080 to U+009F, whose 0x9B is CSI: the same as ESC [ on terminals that read C1 codes.
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace probekit
