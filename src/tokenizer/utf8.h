// UTF-8 decoding and the character classes the Hugging Face tokenizers crate takes from Rust's `char`
// methods and `regex` crate, so that splits agree with it code point by code point.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/utf8_text.h"  // is_valid_utf8, to_valid_utf8

namespace probekit::tokenizer {

/// Length of the UTF-8 sequence that starts with `lead` (1 for ASCII and for stray continuation bytes).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

/// Decodes the code point starting at `text[pos]` and moves `pos` past it; `text` must be valid UTF-8.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  if (s[0] < 0x80) {
    pos += 1;
    return s[0];
  }
  if (s[0] < 0xE0) {
    pos += 2;
    return (char32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (s[0] < 0xF0) {
    pos += 3;
    return (char32_t(s[0] & 0x0F) << 12) | (char32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(s[0] & 0x07) << 18) | (char32_t(s[1] & 0x3F) << 12) | (char32_t(s[2] & 0x3F) << 6) |
         (s[3] & 0x3F);
}

/// Decodes the last code point of non-empty valid UTF-8 `text`.
char32_t last_code_point(std::string_view text);

/// Appends the UTF-8 encoding of `cp`.
void append_utf8(std::string& out, char32_t cp);

/// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(char32_t cp);

/// Rust's char::is_numeric: general categories Nd, Nl and No.
bool is_numeric(char32_t cp);

/// The crate's punctuation test: ASCII punctuation (symbols included) or a general category P*.
bool is_punctuation(char32_t cp);

/// `\w` of Rust's regex crate: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t cp);

/// General categories Mn, Mc and Me (combining marks).
bool is_mark(char32_t cp);

}  // namespace probekit::tokenizer
