#include "common/json.h"

#include <fmt/format.h>

#include <set>

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

size_t json_nesting_past(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

namespace {

// nlohmann reads an integer literal past 64 bits as a double, which a chat template would print as
// 1.8446744073709552e+19 where Python keeps the integer exact: such a literal is refused instead, naming it, within
// the top-level fields `exact` names (everywhere when it is empty).
class ExactIntegers : public nlohmann::detail::json_sax_dom_parser<OrderedJson> {
 public:
  ExactIntegers(OrderedJson& root, const std::string& source, const std::set<std::string>& exact)
      : json_sax_dom_parser(root), source_(source), exact_(exact) {}

  bool number_float(double value, const std::string& literal) {
    const bool checked = exact_.empty() || (depth_ > 0 && exact_.count(field_) > 0);
    if (checked && literal.find_first_of(".eE") == std::string::npos) {
      fail_input("{}: {}the integer {} does not fit in 64 bits (give it as a string)", source_,
                 field_.empty() ? "" : "in '" + field_ + "', ", literal);
    }
    return json_sax_dom_parser::number_float(value, literal);
  }
  bool key(std::string& name) {
    if (depth_ == 1) field_ = name;
    return json_sax_dom_parser::key(name);
  }
  bool start_object(std::size_t size) { return nest(1) && json_sax_dom_parser::start_object(size); }
  bool end_object() { return nest(-1) && json_sax_dom_parser::end_object(); }
  bool start_array(std::size_t size) { return nest(1) && json_sax_dom_parser::start_array(size); }
  bool end_array() { return nest(-1) && json_sax_dom_parser::end_array(); }

 private:
  bool nest(int step) {
    depth_ += step;
    return true;
  }

  const std::string& source_;
  const std::set<std::string>& exact_;
  int depth_ = 0;      // of the containers open around the value being read
  std::string field_;  // the top-level object's key the value is under
};

// `parse()`'s value; its syntax errors name `source` and say the position once.
template <typename Parse>
auto parse_reporting(std::string_view text, const std::string& source, const Parse& parse) -> decltype(parse()) {
  if (const size_t at = json_nesting_past(text, kMaxJsonNesting); at != std::string_view::npos) {
    const std::string position = text.find('\n') == std::string_view::npos ? fmt::format("column {}", at + 1)
                                                                               : describe_position(text, at);
    fail("{}: arrays and objects nest more than {} levels deep (at {})", source, kMaxJsonNesting, position);
  }
  try {
    return parse();
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports the byte just past the offending character, and prefixes its own id and position, which
    // are left out: the position is said once, as a column alone in a text of one line (a JSONL line, named by
    // `source`).
    size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string detail = e.what();
    const size_t own_position = detail.find("parse error");
    if (own_position != std::string::npos && detail.find(": ", own_position) != std::string::npos) {
      detail = detail.substr(detail.find(": ", own_position) + 2);
    }
    const std::string position = text.find('\n') == std::string_view::npos ? fmt::format("column {}", at + 1)
                                                                               : describe_position(text, at);
    fail("{}: invalid JSON at {}: {}", source, position, detail);
  } catch (const nlohmann::json::out_of_range& e) {  // a number beyond a double's range, as 1e400
    fail("{}: invalid JSON: {}", source, e.what());
  }
}

}  // namespace

Json parse_json(std::string_view text, const std::string& source) {
  return parse_reporting(text, source, [&] { return Json::parse(text.begin(), text.end()); });
}

OrderedJson parse_ordered_json(std::string_view text, const std::string& source, const std::set<std::string>& exact) {
  return parse_reporting(text, source, [&] {
    OrderedJson root;
    ExactIntegers builder(root, source, exact);
    OrderedJson::sax_parse(text.begin(), text.end(), &builder);
    return root;
  });
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
