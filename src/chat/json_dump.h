// Python's json.dumps over template values, for transformers' `tojson` filter (which calls json.dumps with
// ensure_ascii=False by default, unlike jinja2's own filter that escapes HTML characters).
#pragma once

#include <optional>
#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// json.dumps's options.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  /// Absent: everything on one line. Present: a newline and this per level (indent=2 is "  ").
  std::optional<std::string> indent;
  /// The separators; json.dumps's defaults are ", " and ": " on one line, "," and ": " with an indent.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

/// json.dumps(value, ...): floats as Python's repr, NaN and infinities as NaN, Infinity and -Infinity, tuples
/// as arrays; Undefined, a namespace or a function fails as "not JSON serializable".
std::string json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace probekit::chat
