// A quoted string in a template's tag, read as jinja2 reads it: up to the matching quote, backslash escapes
// decoded as Python's "unicode-escape" codec decodes them (\n, \t, \\, \', \xNN, \uNNNN, octal, ...), an
// unknown escape kept with its backslash.
#pragma once

#include <string>
#include <string_view>

namespace probekit::chat {

/// The value of the string literal that starts with a quote at `source[start]`; `end` is set past the closing
/// quote, or to 0 when the string never closes.
std::string read_string_literal(std::string_view source, size_t start, size_t& end);

}  // namespace probekit::chat
