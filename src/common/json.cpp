#include "common/json.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace probekit {

std::string describe_position(std::string_view text, size_t byte_offset) {
  byte_offset = std::min(byte_offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte_offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

namespace {

template <typename AnyJson>
AnyJson parse_any_json(std::string_view text, const std::string& source) {
  try {
    return AnyJson::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports the byte just past the offending character.
    size_t at = e.byte > 0 ? e.byte - 1 : 0;
    fail("{}: invalid JSON at {}: {}", source, describe_position(text, at), e.what());
  } catch (const nlohmann::json::out_of_range& e) {  // a number beyond a double's range, as 1e400
    fail("{}: invalid JSON: {}", source, e.what());
  }
}

}  // namespace

Json parse_json(std::string_view text, const std::string& source) { return parse_any_json<Json>(text, source); }

OrderedJson parse_ordered_json(std::string_view text, const std::string& source) {
  return parse_any_json<OrderedJson>(text, source);
}

Json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

std::string dump_json(const Json& value, int indent) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

void write_json_file(const std::string& path, const Json& value) { write_file_atomic(path, dump_json(value, 2) + "\n"); }

void fail_json_type(const std::string& where, const std::string& key, const char* expected, const Json& value) {
  if (value.is_null()) fail("{}: missing '{}'", where, key);
  fail("{}: '{}' must be {}, got {}", where, key, expected, dump_json(value));
}

}  // namespace probekit
