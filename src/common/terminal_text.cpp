#include "common/terminal_text.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>

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

}  // namespace

size_t code_point_columns(std::string_view text, size_t i) {
  if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) return 0;
  const char32_t cp = code_point_at(text, i);
  if (cp < 0x80) return 1;  // ASCII, its control characters as terminal_text shows them escaped
  // Unicode's East Asian widths, with emoji wide and combining marks, joiners and variation selectors of no width.
  return static_cast<size_t>(std::max(0, utf8proc_charwidth(static_cast<utf8proc_int32_t>(cp))));
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
