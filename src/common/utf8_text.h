// Whether bytes are UTF-8, their repair, and the trimming of typed text: for text from files and users (labels,
// tokenizer input, templates) that goes on to JSON, which holds only UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace probekit {

/// True when `bytes` is well-formed UTF-8 (no surrogates, no overlong forms).
bool is_valid_utf8(std::string_view bytes);

/// Replaces each maximal invalid subsequence with U+FFFD, exactly as Rust's String::from_utf8_lossy and
/// Python's bytes.decode("utf-8", errors="replace") do.
std::string to_valid_utf8(std::string_view bytes);

/// `text` without the UTF-8 byte-order mark some editors put at a file's start (it is no part of the text).
std::string_view without_byte_order_mark(std::string_view text);

/// `text` without the spaces, tabs, carriage returns and line feeds at either end (what people type around a value).
std::string_view trimmed(std::string_view text);

}  // namespace probekit
