// Python's str operations, code point by code point over UTF-8 text: case mapping, strip, split, find, and the
// indices and lengths Python counts in code points, not bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace probekit::chat {

/// The code points of UTF-8 text.
std::u32string decode_utf8(std::string_view text);
/// UTF-8 text of code points.
std::string encode_utf8(std::u32string_view code_points);
/// len(text) in Python: the number of code points.
int64_t code_point_length(std::string_view text);

/// str.isspace() for one code point: Unicode White_Space and the separators U+001C..U+001F.
bool is_python_space(char32_t cp);

/// str.upper() and str.lower() (one code point for one; Python's few multi-character mappings, as ß -> SS,
/// are not applied).
std::string python_upper(std::string_view text);
std::string python_lower(std::string_view text);
/// str.capitalize(): the first character in title case, the rest lower case.
std::string python_capitalize(std::string_view text);
/// str.title(): title case after a character that is not cased, lower case after one that is.
std::string python_title(std::string_view text);
/// jinja2's `title` filter: each word cut at whitespace, '-', '(', '{', '[' or '<' gets its first character
/// upper-cased and the rest lower-cased.
std::string jinja_title(std::string_view text);

/// str.islower() / str.isupper(): some cased character, and every cased one in that case (by Unicode's
/// Lowercase and Uppercase properties, as Python: 'ª' is lower case, 'Ⅰ' upper case).
bool python_is_lower(std::string_view text);
bool python_is_upper(std::string_view text);
/// str.isdecimal(), isdigit(), isnumeric(), isalpha(), isalnum(), isspace(): not empty, and every character a
/// decimal digit (Nd), a digit (Nd, superscripts, circled digits), numeric (N*, CJK numerals), a letter (L*), a
/// letter or number (L*, N*), or whitespace.
bool python_is_decimal(std::string_view text);
bool python_is_digit(std::string_view text);
bool python_is_numeric(std::string_view text);
/// str.isascii(): every byte below 0x80 (the empty text too).
bool python_is_ascii(std::string_view text);
bool python_is_alpha(std::string_view text);
bool python_is_alnum(std::string_view text);
bool python_is_space(std::string_view text);
/// str.isidentifier(): not empty, a first character of XID_Start or '_', the others XID_Continue.
bool python_is_identifier(std::string_view text);
/// str.isprintable(): no control, format, surrogate, private-use, unassigned or separator character but the space
/// (the empty text too).
bool is_printable(char32_t cp);
bool python_is_printable(std::string_view text);

/// The number of runs of word characters (Python's regex \w: letters, numbers, '_'), as jinja2's wordcount.
int64_t python_word_count(std::string_view text);

/// str.strip / lstrip / rstrip: `chars` absent strips whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit): without `sep`, runs of whitespace separate and empty pieces are dropped.
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit);
/// str.replace(old, new, count); count < 0 replaces all.
std::string python_replace(std::string_view text, std::string_view old, std::string_view replacement, int64_t count);
/// str.rsplit(sep, maxsplit): split from the end; without `sep` as split() does.
std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                       int64_t maxsplit);
/// str.splitlines(keepends): cut at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028 and U+2029.
std::vector<std::string> python_splitlines(std::string_view text, bool keepends);

/// The start and end a str method (find, count, index) takes, as Python's slice bounds: absent for the text's
/// start or end, negative from the end.
struct SliceBounds {
  std::optional<int64_t> start;
  std::optional<int64_t> end;
};
/// str.find(sub, start, end), or rfind with `last`: a code point index, -1 when absent.
int64_t python_find(std::string_view text, std::string_view sub, const SliceBounds& bounds = {}, bool last = false);
/// str.startswith(affix, start, end), or endswith with `at_end`, for one affix.
bool python_has_affix(std::string_view text, std::string_view affix, const SliceBounds& bounds, bool at_end);
/// str.count(sub, start, end): non-overlapping occurrences.
int64_t python_count(std::string_view text, std::string_view sub, const SliceBounds& bounds = {});

/// str.swapcase(): upper case to lower and lower to upper, one code point for one as upper() and lower().
std::string python_swapcase(std::string_view text);
/// str.casefold(): Unicode's full case folding, as Python's ('ß' gives 'ss').
std::string python_casefold(std::string_view text);
/// str.istitle(): some cased character; upper and title case ones only after uncased ones, lower case ones
/// only after cased ones.
bool python_is_title(std::string_view text);

enum class Justify { left, center, right };
/// str.ljust / center / rjust(width, fill): `text` padded with `fill` to `width` code points.
std::string python_justify(std::string_view text, int64_t width, char32_t fill, Justify justify);
/// str.zfill(width): zeros on the left, after a leading sign, to `width` code points.
std::string python_zfill(std::string_view text, int64_t width);
/// str.expandtabs(tabsize): each tab to spaces up to the next multiple of `tabsize` columns; \n and \r start a
/// new line's columns.
std::string python_expandtabs(std::string_view text, int64_t tabsize);

}  // namespace probekit::chat
