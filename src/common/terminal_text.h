// Text from files and users shown on a terminal: control characters (ESC starting a colour or a cursor move, BEL,
// a carriage return that overwrites the line) written out as visible escapes, so that a label, a text or a
// generated token shows what it holds rather than acting on the terminal. JSON output escapes them already.
#pragma once

#include <string>
#include <string_view>

namespace probekit {

/// `text` with each C0 control character, DEL and each C1 control character (U+0080 to U+009F) written as \xNN
/// (\u00NN for C1); with `keep_line_breaks`, line feeds and tabs stay as they are (a text of several lines).
std::string terminal_text(std::string_view text, bool keep_line_breaks = false);

/// The terminal columns of the code point whose UTF-8 starts at text[i]: two for the wide East Asian scripts and
/// emoji, none for a combining mark, a joiner or a variation selector (utf8proc's widths), else one; none for a byte
/// inside a code point.
size_t code_point_columns(std::string_view text, size_t i);

/// A UTF-8 text's width in terminal columns, for aligning and cutting what a terminal shows.
size_t display_columns(std::string_view text);

}  // namespace probekit
