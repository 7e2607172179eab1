// jinja2's filters (`value | name(args)`), the ones chat templates use, with jinja2's signatures and quirks,
// and transformers' `tojson`. Filters jinja2 has and this renderer does not (format, groupby, truncate, ...)
// fail by name when the template is parsed.
#pragma once

#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// True when `name` is a filter this renderer applies.
bool has_filter(const std::string& name);
/// Why `name` cannot be used: "No filter named 'x'." (jinja2's words) or that it is not supported here.
std::string missing_filter_message(const std::string& name);
/// operand | name(args).
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);

}  // namespace probekit::chat
