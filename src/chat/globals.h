// The functions every template can call: jinja2's range, dict and namespace, and the two transformers adds,
// raise_exception and strftime_now. jinja2's cycler, joiner and lipsum are refused by name.
#pragma once

#include "chat/scope.h"

namespace probekit::chat {

/// Puts the global functions into the template's outermost scope.
void add_globals(Scope& scope);

}  // namespace probekit::chat
