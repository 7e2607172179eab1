// jinja2's tests (`value is name(args)`): defined, none, string, mapping, iterable, eq, divisibleby, ...,
// answering as jinja2's do for Python values (True is a number; an Undefined is iterable and a sequence).
#pragma once

#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// True when `name` is a test this renderer knows.
bool has_test(const std::string& name);
/// "No test named 'x'." (jinja2's words).
std::string missing_test_message(const std::string& name);
/// value is name(args).
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

}  // namespace probekit::chat
