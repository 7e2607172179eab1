// Runs a parsed template's statements: text and {{ output }}, if chains, for loops with jinja2's `loop`
// variable, break and continue, set (names, tuples, namespace attributes, blocks), macros and call blocks,
// filter and with blocks. An error met in a statement gets the statement's line if it has none yet.
#pragma once

#include <string>

#include "chat/ast.h"
#include "chat/scope.h"

namespace probekit::chat {

/// The text `ast` renders to with the variables (and globals) in `root`.
std::string render_template(const TemplateAst& ast, const ScopePtr& root);

}  // namespace probekit::chat
