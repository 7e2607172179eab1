// JSON through nlohmann::json for small files (configs, metrics, indexes), with errors that name the file and
// the line. Large files (tokenizer.json) are read with simdjson in the tokenizer instead.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace probekit {

using Json = nlohmann::json;

/// Parses JSON text; a syntax error names `source` with line and column.
Json parse_json(std::string_view text, const std::string& source);

/// Reads and parses a JSON file; errors name the file, line and column.
Json read_json_file(const std::string& path);

/// Serializes JSON (indented when `indent` >= 0). Strings that are not UTF-8 (a user's text, a label read from a
/// reference file) show their invalid bytes as U+FFFD instead of failing the output.
std::string dump_json(const Json& value, int indent = -1);

/// Writes pretty-printed JSON atomically (temporary file + rename).
void write_json_file(const std::string& path, const Json& value);

/// Line and column (1-based) of a byte offset in `text`, as "line L, column C".
std::string describe_position(std::string_view text, size_t byte_offset);

}  // namespace probekit
