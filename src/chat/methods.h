// The Python methods a template may call on its values: str's (in string_methods), dict's (items, keys and
// values, which give views, and get) and list's and tuple's (index, count). Methods that change a list or a dict
// are refused as ImmutableSandboxedEnvironment refuses them: the attribute is an Undefined that fails when called.
#pragma once

#include <optional>
#include <string>

#include "chat/value.h"

namespace probekit::chat {

/// `object.name` bound to `object` when it names one of the type's methods; std::nullopt otherwise.
std::optional<Value> find_method(const Value& object, const std::string& name);

}  // namespace probekit::chat
