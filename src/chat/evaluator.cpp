#include "chat/evaluator.h"

#include "chat/access.h"
#include "chat/filters.h"
#include "chat/is_tests.h"
#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

Value optional_value(const ExprPtr& expr, const Scope& scope) { return expr ? evaluate(*expr, scope) : Value(nullptr); }

std::vector<Value> evaluate_items(const Expr& expr, const Scope& scope) {
  std::vector<Value> values;
  for (const ExprPtr& item : expr.items) values.push_back(evaluate(*item, scope));
  return values;
}

Value evaluate_dict(const Expr& expr, const Scope& scope) {
  Value dict = Value::dict();
  for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
    dict.as_dict().set(evaluate(*expr.items[i], scope), evaluate(*expr.items[i + 1], scope));
  }
  return dict;
}

// Python's and/or give back an operand, not a bool: `x or 'default'`.
Value evaluate_logical(const Expr& expr, const Scope& scope) {
  Value left = evaluate(*expr.items[0], scope);
  bool decided = expr.name == "and" ? !truthy(left) : truthy(left);
  return decided ? left : evaluate(*expr.items[1], scope);
}

Value evaluate_binary(const Expr& expr, const Scope& scope) {
  if (expr.name == "and" || expr.name == "or") return evaluate_logical(expr, scope);
  Value left = evaluate(*expr.items[0], scope);
  Value right = evaluate(*expr.items[1], scope);
  if (expr.name == "~") return concatenate(left, right);
  return arithmetic(expr.name, left, right);
}

// a < b < c is a < b and b < c, each operand computed once.
Value evaluate_compare(const Expr& expr, const Scope& scope) {
  Value left = evaluate(*expr.items[0], scope);
  for (size_t i = 0; i < expr.operators.size(); i++) {
    Value right = evaluate(*expr.items[i + 1], scope);
    const std::string& op = expr.operators[i];
    bool holds = op == "in" ? contains(right, left) : op == "not in" ? !contains(right, left) : compare(op, left, right);
    if (!holds) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value evaluate_unary(const Expr& expr, const Scope& scope) {
  Value operand = evaluate(*expr.items[0], scope);
  if (expr.name == "not") return Value(!truthy(operand));
  return negate_or_keep(expr.name, operand);
}

Value evaluate_conditional(const Expr& expr, const Scope& scope) {
  if (truthy(evaluate(*expr.items[0], scope))) return evaluate(*expr.items[1], scope);
  if (expr.items[2]) return evaluate(*expr.items[2], scope);
  return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line));
}

// A filter applied to its operand; in a filter block's or set block's chain (`input` given) the innermost
// operand is that input.
Value evaluate_filter(const Expr& expr, const Scope& scope, const Value* input) {
  const ExprPtr& inner = expr.items[0];
  Value operand = input == nullptr ? evaluate(*inner, scope) : inner ? evaluate_filter(*inner, scope, input) : *input;
  return apply_filter(expr.name, operand, evaluate_arguments(expr, 1, scope));
}

Value evaluate_node(const Expr& expr, const Scope& scope) {
  switch (expr.kind) {
    case ExprKind::literal: return expr.value;
    case ExprKind::name: return scope.lookup(expr.name);
    case ExprKind::list: return Value::list(evaluate_items(expr, scope));
    case ExprKind::tuple: return Value::tuple(evaluate_items(expr, scope));
    case ExprKind::dict: return evaluate_dict(expr, scope);
    case ExprKind::attribute: return get_attribute(evaluate(*expr.items[0], scope), expr.name);
    case ExprKind::item: return get_item(evaluate(*expr.items[0], scope), evaluate(*expr.items[1], scope));
    case ExprKind::slice:
      return get_slice(evaluate(*expr.items[0], scope), optional_value(expr.items[1], scope),
                       optional_value(expr.items[2], scope), optional_value(expr.items[3], scope));
    case ExprKind::call: return call_value(evaluate(*expr.items[0], scope), evaluate_arguments(expr, 1, scope));
    case ExprKind::filter: return evaluate_filter(expr, scope, nullptr);
    case ExprKind::test:
      return Value(apply_test(expr.name, evaluate(*expr.items[0], scope), evaluate_arguments(expr, 1, scope)) != expr.negated);
    case ExprKind::unary: return evaluate_unary(expr, scope);
    case ExprKind::binary: return evaluate_binary(expr, scope);
    case ExprKind::compare: return evaluate_compare(expr, scope);
    case ExprKind::conditional: return evaluate_conditional(expr, scope);
  }
  return Value();
}

}  // namespace

Value evaluate(const Expr& expr, const Scope& scope) {
  try {
    RenderNesting nesting;
    return evaluate_node(expr, scope);
  } catch (const TemplateError& e) {
    if (e.line() != 0) throw;
    e.rethrow_at(expr.line);
  }
}

Value apply_filter_chain(const Expr& chain, const Value& input, const Scope& scope) {
  try {
    return evaluate_filter(chain, scope, &input);
  } catch (const TemplateError& e) {
    if (e.line() != 0) throw;
    e.rethrow_at(chain.line);
  }
}

CallArgs evaluate_arguments(const Expr& expr, size_t first, const Scope& scope) {
  CallArgs args;
  for (size_t i = first; i < expr.items.size(); i++) args.positional.push_back(evaluate(*expr.items[i], scope));
  for (const auto& [name, value] : expr.keywords) args.keywords.emplace_back(name, evaluate(*value, scope));
  return args;
}

Value call_value(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) fail_render("'{}' object is not callable", type_name(callee));
  return callee.as_callable().call(args);
}

}  // namespace probekit::chat
