// JSON through nlohmann::json for small files (configs, metrics, indexes), with errors that name the file and
// the line. Large files (tokenizer.json) are read with simdjson in the tokenizer instead.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>

namespace probekit {

using Json = nlohmann::json;
/// JSON whose objects keep their keys in the order written: what reaches a chat template, whose tojson prints them so.
using OrderedJson = nlohmann::ordered_json;

/// How deep the arrays and objects of a JSON file may nest: deeper, a file is refused before it is parsed, since
/// printing or comparing such a value recurses once per level (a hostile file would overflow the stack).
inline constexpr int kMaxJsonNesting = 512;

/// The byte offset of the first bracket of `text` that opens a level past `max_depth` (outside strings), or npos.
size_t json_nesting_past(std::string_view text, int max_depth);

/// Parses JSON text; a syntax error names `source` and where (line and column, or the column in a text of one line),
/// as does nesting past kMaxJsonNesting.
Json parse_json(std::string_view text, const std::string& source);

/// The same, keeping the order of each object's keys, as what reaches a chat template is read: an integer past 64
/// bits is refused (read as a double, it would print otherwise than Python's exact integer), within the top-level
/// fields `exact` names, or anywhere when it names none.
OrderedJson parse_ordered_json(std::string_view text, const std::string& source, const std::set<std::string>& exact = {});

/// Reads and parses a JSON file; errors name the file, line and column.
Json read_json_file(const std::string& path);

/// object[key] converted to T, or `fallback` when the key is absent (or null); a value of another type throws
/// naming `where` (the file and the place in it) and the key: "probes.json: 'layer' must be a number, got "two"".
template <typename T>
T json_value(const Json& object, const std::string& key, const T& fallback, const std::string& where);

/// object[key] converted to T; an absent key or a value of another type throws naming `where` and the key.
template <typename T>
T json_at(const Json& object, const std::string& key, const std::string& where);

/// Serializes JSON (indented when `indent` >= 0). Strings that are not UTF-8 (a user's text, a label read from a
/// reference file) show their invalid bytes as U+FFFD instead of failing the output.
std::string dump_json(const Json& value, int indent = -1);

/// Writes pretty-printed JSON atomically (temporary file + rename).
void write_json_file(const std::string& path, const Json& value);

/// Line and column (1-based) of a byte offset in `text`, as "line L, column C".
std::string describe_position(std::string_view text, size_t byte_offset);

/// Throws the type error of json_value.
[[noreturn]] void fail_json_type(const std::string& where, const std::string& key, const char* expected, const Json& value);

template <typename T>
T json_value(const Json& object, const std::string& key, const T& fallback, const std::string& where) {
  if (!object.is_object()) fail_json_type(where, key, "inside an object", object);
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!found->is_string()) fail_json_type(where, key, "a string", *found);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!found->is_boolean()) fail_json_type(where, key, "true or false", *found);
  } else if constexpr (std::is_integral_v<T>) {
    if (!found->is_number_integer()) fail_json_type(where, key, "an integer", *found);
  } else {
    if (!found->is_number()) fail_json_type(where, key, "a number", *found);
  }
  return found->get<T>();
}

template <typename T>
T json_at(const Json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || object.at(key).is_null()) fail_json_type(where, key, "present", nullptr);
  return json_value<T>(object, key, T{}, where);
}

}  // namespace probekit
