// The parsed template: expressions and statements, each with the line it starts on for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace probekit::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  literal,      // value
  name,         // name
  list,         // items
  tuple,        // items
  dict,         // items: key, value, key, value, ...
  attribute,    // items[0].name
  item,         // items[0][items[1]]
  slice,        // items[0][items[1]:items[2]:items[3]], absent bounds null
  call,         // items[0](items[1..], keywords)
  filter,       // name(items[0], items[1..], keywords); items[0] null in a filter block
  test,         // items[0] is [not] name(items[1..]); negated
  unary,        // name ("not", "-", "+") items[0]
  binary,       // items[0] name items[1]: arithmetic, "~", "and", "or"
  compare,      // items[0] operators[0] items[1] operators[1] items[2] ...: chained as in Python
  conditional,  // items[1] if items[0] else items[2] (items[2] null without else)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                          // literal
  std::string name;                     // name, attribute, filter, test or operator
  std::vector<ExprPtr> items;           // operands, in the order listed above
  std::vector<std::string> operators;   // compare: "==", "in", "not in", ...
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // call, filter
  bool negated = false;                 // test: `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  text,        // text
  output,      // {{ expr }}
  if_chain,    // exprs[i] -> bodies[i]; a last body without condition is the else
  for_loop,    // for targets in expr [if condition]: bodies[0], else bodies[1]
  set,         // targets = expr; target "ns.attr" assigns a namespace attribute
  set_block,   // {% set targets[0] [| filters] %}bodies[0]{% endset %}; filters applied through expr
  macro,       // macro name(parameters) bodies[0]
  call_block,  // {% call(parameters) expr %}bodies[0]{% endcall %}: caller() renders the body
  filter_block,  // {% filter expr %}: expr is a filter chain applied to bodies[0]'s text
  with_block,  // {% with targets = exprs %}bodies[0]
  break_loop,
  continue_loop,
  generation,  // transformers' {% generation %}: renders its body
};

/// A macro's parameter and its default (null when it has none).
struct MacroParameter {
  std::string name;
  ExprPtr fallback;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                    // text; macro name
  ExprPtr expr;                        // output, for (iterable), set, call_block, filter_block
  ExprPtr condition;                   // for: the loop filter
  std::vector<std::string> targets;    // for, set, set_block, with
  std::vector<ExprPtr> exprs;          // if_chain: the conditions; with: the values
  std::vector<Body> bodies;
  std::vector<MacroParameter> parameters;  // macro, call_block
};

/// A parsed template.
struct TemplateAst {
  Body body;
};

}  // namespace probekit::chat
