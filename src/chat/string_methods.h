// The methods of Python's str a template may call ('a b'.split(), 'x'.center(5, '*'), ...), with Python's
// arguments (most by position only), defaults and errors, counting in code points.
#pragma once

#include <optional>
#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// `text.name` bound to the string `text` when `name` is one of str's methods; std::nullopt otherwise.
std::optional<Value> find_string_method(const Value& text, const std::string& name);

}  // namespace probekit::chat
