#include "tokenizer/read_pattern.h"

#include <exception>

namespace probekit::tokenizer {

Pattern read_pattern(const JsonNode& node) {
  if (std::optional<JsonNode> literal = node.find("String")) return Pattern::literal(std::string(literal->as_string()));
  if (std::optional<JsonNode> regex = node.find("Regex")) {
    try {
      return Pattern::regex(std::string(regex->as_string()));
    } catch (const std::exception& e) {
      regex->fail("{}", e.what());
    }
  }
  node.fail("expected {{\"String\": ...}} or {{\"Regex\": ...}}");
}

}  // namespace probekit::tokenizer
