#include "tokenizer/normalizers/unicode_normalizers.h"

#include <utf8proc.h>

#include <cstdlib>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

bool is_ascii(const std::string& text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Below U+0300 nothing composes and nothing has a canonical decomposition that NFC would change.
bool is_nfc_stable(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (next_code_point(text, pos) >= 0x300) return false;
  }
  return true;
}

// Rewrites every code point of `text` with `map(cp, out)`.
template <typename MapFn>
void map_code_points(std::string& text, MapFn&& map) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) map(next_code_point(text, pos), out);
  text.swap(out);
}

}  // namespace

void UnicodeNormalizer::normalize(std::string& text) const {
  if (is_ascii(text) || (form_ == UnicodeForm::kNFC && is_nfc_stable(text))) return;
  int options = UTF8PROC_STABLE;
  switch (form_) {
    case UnicodeForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                         static_cast<utf8proc_ssize_t>(text.size()), &result,
                                         static_cast<utf8proc_option_t>(options));
  if (length < 0) fail("Unicode normalization failed: {}", utf8proc_errmsg(length));
  text.assign(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
  std::free(result);
}

void LowercaseNormalizer::normalize(std::string& text) const {
  map_code_points(text, [](char32_t cp, std::string& out) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping (SpecialCasing)
      out.append("i\xCC\x87");
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  });
}

void StripAccentsNormalizer::normalize(std::string& text) const {
  map_code_points(text, [](char32_t cp, std::string& out) {
    if (!is_mark(cp)) append_utf8(out, cp);
  });
}

void NmtNormalizer::normalize(std::string& text) const {
  map_code_points(text, [](char32_t cp, std::string& out) {
    if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F || cp == 0x8F ||
        cp == 0x9F) {
      return;
    }
    bool separator = cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0x1680 ||
                     (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 || cp == 0x2581 ||
                     cp == 0xFEFF || cp == 0xFFFD;
    append_utf8(out, separator ? U' ' : cp);
  });
}

}  // namespace probekit::tokenizer
