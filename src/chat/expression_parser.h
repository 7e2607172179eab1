// Expressions by jinja2's grammar, loosest binding first: `a if c else b`, or, and, not, comparisons (in,
// not in, chained), + -, ~, * / // %, **, unary - +, then primaries with their .attr, [item], [a:b:c], (call),
// |filter and `is` test. Unknown filters and tests fail here, as jinja2 fails when it compiles.
#pragma once

#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/token_stream.h"

namespace probekit::chat {

/// One expression; `with_conditional` false stops before a trailing `if` (a for loop's filter).
ExprPtr parse_expression(TokenStream& stream, bool with_conditional = true);

/// Expressions separated by commas, a tuple when there is a comma (`{{ a, b }}`, `set x = 1, 2`), up to the
/// tag's end, a ')' or one of the names in `end_names`.
ExprPtr parse_tuple(TokenStream& stream, bool with_conditional = true, const std::vector<std::string>& end_names = {});

/// A chain of filters (`upper | replace('a', 'b')`) applied to nothing: a filter block's or a set block's;
/// the innermost operand is null and is given when the chain runs.
ExprPtr parse_filter_chain(TokenStream& stream);

}  // namespace probekit::chat
