// Macros and call-block callers as jinja2 calls them: arguments by position, then by keyword, then the
// parameter's default (computed in the macro's scope, so it may use earlier parameters); extra arguments go
// to `varargs` and `kwargs` only when the body uses those names, and fail otherwise.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/scope.h"

namespace probekit::chat {

/// Renders a body in a scope and returns its text.
using BodyRenderer = std::function<std::string(const Body& body, const ScopePtr& scope)>;

/// What a macro needs when it is called; the statement it points into outlives the render.
struct MacroDefinition {
  std::string name;
  const std::vector<MacroParameter>* parameters;
  const Body* body;
  // Where the macro was defined: its body sees that scope's variables. Weak, because the macro is itself a
  // variable of that scope; the renderer keeps the scope alive until the render ends.
  std::weak_ptr<Scope> scope;
};

/// The callable value of a macro (or of a call block's `caller`).
Value make_macro(MacroDefinition definition, BodyRenderer render);

}  // namespace probekit::chat
