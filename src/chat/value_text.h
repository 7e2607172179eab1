// Values as text, exactly as Python prints them: str() for `{{ x }}` and the `string` filter, repr() inside
// lists and dicts (['a', 1.0, None]), floats in their shortest round-trip form (0.1, 1e-05, 1e+16).
#pragma once

#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// str(value): None, True, 2.5, text as is, containers through repr(); Undefined prints as nothing.
std::string python_str(const Value& value);
/// repr(value): strings quoted and escaped as Python quotes them.
std::string python_repr(const Value& value);
/// repr(float): the shortest text that reads back as the same double, in Python's layout.
std::string float_repr(double value);
/// The Python type's name, for error messages: 'str', 'int', 'NoneType', 'dict', ...
std::string type_name(const Value& value);

}  // namespace probekit::chat
