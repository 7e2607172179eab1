// JSON errors: the file (and line) they come from, the position once, and the parser's words without its own prefix.
#include <doctest/doctest.h>

#include "common/json.h"

using probekit::parse_json;
using probekit::parse_ordered_json;

namespace {

std::string parse_error(const std::string& text, const std::string& source) {
  try {
    parse_json(text, source);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a JSON syntax error names its source and says the position once, a column alone within one line") {
  // Regression: a JSONL line named as "file:6" was said to fail "at line 1", and the message repeated the
  // position inside nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 47: ...".
  const std::string line = R"({"text": "hi", "cognitive_action": "analyzing")";
  const std::string message = parse_error(line, "texts.jsonl:6");
  CHECK(message.rfind("texts.jsonl:6: invalid JSON at column ", 0) == 0);
  CHECK(message.find("syntax error while parsing object") != std::string::npos);
  CHECK(message.find("json.exception") == std::string::npos);
  CHECK(message.find("line 1") == std::string::npos);
  // A text of several lines (a file) says its line and column.
  CHECK(parse_error("{\n  \"a\": 1,\n  \"b\": }\n", "probes.json").rfind("probes.json: invalid JSON at line 3, column 8: ", 0) == 0);
  // The ordered reading fails the same way.
  CHECK_THROWS_WITH(parse_ordered_json(line, "texts.jsonl:6"), doctest::Contains("texts.jsonl:6: invalid JSON at column "));
}

TEST_CASE("what reaches a chat template keeps integers exact: one past 64 bits is refused, not read as a double") {
  // Regression: 18446744073709551616 became 1.8446744073709552e+19 in the template's output, where transformers
  // (Python's json.loads) prints the integer.
  CHECK_THROWS_WITH_AS(parse_ordered_json(R"([{"role": "tool", "content": {"id": 18446744073709551616}}])", "chat.json"),
                       "chat.json: the integer 18446744073709551616 does not fit in 64 bits (give it as a string)",
                       std::invalid_argument);
  CHECK_THROWS_WITH(parse_ordered_json("[-9223372036854775809]", "x"), doctest::Contains("the integer -9223372036854775809"));
  CHECK(parse_ordered_json("[9223372036854775807, -9223372036854775808, 1e30, 2.5, 0]", "x").dump() ==
        "[9223372036854775807,-9223372036854775808,1e+30,2.5,0]");
  // Inside a string, digits are text.
  CHECK(parse_ordered_json(R"({"id": "18446744073709551616"})", "x").at("id") == "18446744073709551616");
}

TEST_CASE("JSON nested past 512 levels is refused before it is parsed, naming its source and where") {
  // Regression: a progress file of 200,000 nested brackets was parsed, then printed in a message by recursion that
  // overflowed the stack (SIGSEGV).
  const std::string deep = std::string(600, '[') + std::string(600, ']');
  CHECK(parse_error(deep, "sweep.progress.jsonl:2") ==
        "sweep.progress.jsonl:2: arrays and objects nest more than 512 levels deep (at column 513)");
  CHECK_THROWS_WITH(parse_ordered_json("{\"a\":\n" + deep + "}", "messages.json"),
                    doctest::Contains("messages.json: arrays and objects nest more than 512 levels deep (at line 2, column 512)"));
  const std::string at_bound = std::string(512, '[') + std::string(512, ']');
  CHECK(parse_json(at_bound, "bound").is_array());
  // Brackets inside strings, escaped quotes among them, are not nesting.
  const std::string quoted = "\"\\\"" + std::string(600, '[') + "\"";
  CHECK(parse_json(quoted, "quoted").get<std::string>().size() == 601);
  CHECK(probekit::json_nesting_past(quoted, 1) == std::string::npos);
  CHECK(probekit::json_nesting_past("[{\"k\": [1]}]", 2) == 7);
}
