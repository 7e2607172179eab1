// Computes expressions: names from the scope, literals, .attr / [item] / [a:b:c], calls, filters, tests and
// operators, each as jinja2 evaluates them. An error met inside an expression gets the expression's line.
#pragma once

#include "chat/ast.h"
#include "chat/scope.h"

namespace probekit::chat {

/// The value of `expr` in `scope`.
Value evaluate(const Expr& expr, const Scope& scope);

/// Applies a filter block's or a set block's chain (its innermost operand null) to `input`.
Value apply_filter_chain(const Expr& chain, const Value& input, const Scope& scope);

/// The arguments of a call, a filter or a test: items from `first` on, and the keywords.
CallArgs evaluate_arguments(const Expr& expr, size_t first, const Scope& scope);

/// Calls a callable value; an Undefined fails with its hint, anything else as "not callable".
Value call_value(const Value& callee, const CallArgs& args);

}  // namespace probekit::chat
