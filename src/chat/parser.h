// Statements by jinja2's grammar: text, {{ output }}, and the tags for / if / set / macro / call / filter /
// with / break / continue, plus transformers' {% generation %}. A tag jinja2 does not know fails as jinja2
// fails ("Encountered unknown tag 'x'."); the template tags that need a loader (include, extends, import,
// block, ...) are refused by name.
#pragma once

#include <string_view>

#include "chat/ast.h"

namespace probekit::chat {

/// Parses a template; syntax errors throw TemplateError naming the line.
TemplateAst parse_template(std::string_view source);

}  // namespace probekit::chat
