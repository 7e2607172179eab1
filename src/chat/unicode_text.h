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

/// str.islower() / str.isupper(): some cased character, and every cased one in that case.
bool python_is_lower(std::string_view text);
bool python_is_upper(std::string_view text);
/// str.isdigit(), isalpha(), isalnum(), isspace(): not empty, and every character a decimal digit (Nd), a
/// letter (L*), a letter or number (L*, N*), or whitespace.
bool python_is_digit(std::string_view text);
bool python_is_alpha(std::string_view text);
bool python_is_alnum(std::string_view text);
bool python_is_space(std::string_view text);

/// The number of runs of word characters (Python's regex \w: letters, numbers, '_'), as jinja2's wordcount.
int64_t python_word_count(std::string_view text);

/// str.strip / lstrip / rstrip: `chars` absent strips whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit): without `sep`, runs of whitespace separate and empty pieces are dropped.
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit);
/// str.replace(old, new, count); count < 0 replaces all.
std::string python_replace(std::string_view text, std::string_view old, std::string_view replacement, int64_t count);
/// str.find(sub) as a code point index, -1 when absent.
int64_t python_find(std::string_view text, std::string_view sub);
/// str.count(sub): non-overlapping occurrences.
int64_t python_count(std::string_view text, std::string_view sub);

}  // namespace probekit::chat
