#include "chat/macro.h"

#include "chat/evaluator.h"
#include "chat/template_error.h"

namespace probekit::chat {

namespace {

// True when an expression or a statement in `body` names the variable `name`: jinja2 gives a macro varargs,
// kwargs and caller only when its body uses them.
bool body_uses_name(const Body& body, const std::string& name);

bool expr_uses_name(const Expr* expr, const std::string& name) {
  if (expr == nullptr) return false;
  if (expr->kind == ExprKind::name && expr->name == name) return true;
  for (const ExprPtr& item : expr->items) {
    if (expr_uses_name(item.get(), name)) return true;
  }
  for (const auto& keyword : expr->keywords) {
    if (expr_uses_name(keyword.second.get(), name)) return true;
  }
  return false;
}

bool stmt_uses_name(const Stmt& stmt, const std::string& name) {
  if (expr_uses_name(stmt.expr.get(), name) || expr_uses_name(stmt.condition.get(), name)) return true;
  for (const ExprPtr& expr : stmt.exprs) {
    if (expr_uses_name(expr.get(), name)) return true;
  }
  for (const MacroParameter& parameter : stmt.parameters) {
    if (expr_uses_name(parameter.fallback.get(), name)) return true;
  }
  for (const Body& body : stmt.bodies) {
    if (body_uses_name(body, name)) return true;
  }
  return false;
}

bool body_uses_name(const Body& body, const std::string& name) {
  for (const StmtPtr& stmt : body) {
    if (stmt_uses_name(*stmt, name)) return true;
  }
  return false;
}

struct Macro {
  MacroDefinition definition;
  BodyRenderer render;
  bool catch_varargs;
  bool catch_kwargs;
  bool uses_caller;

  Value invoke(const CallArgs& args) const {
    const auto& parameters = *definition.parameters;
    if (args.positional.size() > parameters.size() && !catch_varargs) {
      fail_render("macro '{}' takes not more than {} argument(s)", definition.name, parameters.size());
    }
    ScopePtr defined_in = definition.scope.lock();
    if (defined_in == nullptr) fail_render("macro '{}' was called after the render that defined it ended", definition.name);
    auto scope = std::make_shared<Scope>(defined_in);
    std::vector<bool> bound(parameters.size(), false);
    for (size_t i = 0; i < parameters.size() && i < args.positional.size(); i++) {
      scope->set(parameters[i].name, args.positional[i]);
      bound[i] = true;
    }
    Value extra_keywords = Value::dict();
    for (const auto& [name, value] : args.keywords) {
      if (!bind_keyword(*scope, bound, name, value)) extra_keywords.as_dict().set(Value(name), value);
    }
    for (size_t i = 0; i < parameters.size(); i++) {
      if (bound[i]) continue;
      const MacroParameter& parameter = parameters[i];
      scope->set(parameter.name, parameter.fallback ? evaluate(*parameter.fallback, *scope)
                                                     : Value::undefined("parameter '" + parameter.name + "' was not provided"));
    }
    finish_special_variables(*scope, args, extra_keywords);
    return Value(render(*definition.body, scope));
  }

  // Binds a keyword argument to its parameter; false when no parameter has that name.
  bool bind_keyword(Scope& scope, std::vector<bool>& bound, const std::string& name, const Value& value) const {
    const auto& parameters = *definition.parameters;
    for (size_t i = 0; i < parameters.size(); i++) {
      if (parameters[i].name != name) continue;
      if (bound[i]) fail_render("macro '{}' got multiple values for argument '{}'", definition.name, name);
      scope.set(name, value);
      bound[i] = true;
      return true;
    }
    return false;
  }

  // caller, varargs and kwargs, for the bodies that use them; extra arguments fail for those that do not.
  void finish_special_variables(Scope& scope, const CallArgs& args, Value& extra_keywords) const {
    if (uses_caller) {
      const Value* caller = extra_keywords.as_dict().find(Value("caller"));
      scope.set("caller", caller != nullptr ? *caller : Value::undefined("No caller defined"));
      auto& items = extra_keywords.as_dict().items;
      for (auto it = items.begin(); it != items.end(); ++it) {
        if (it->first.is_string() && it->first.as_string() == "caller") {
          items.erase(it);
          break;
        }
      }
    }
    if (catch_kwargs) {
      scope.set("kwargs", extra_keywords);
    } else if (extra_keywords.as_dict().find(Value("caller")) != nullptr) {
      fail_render("macro '{}' was invoked with two values for the special caller argument. This is most likely a bug.", definition.name);
    } else if (!extra_keywords.as_dict().items.empty()) {
      fail_render("macro '{}' takes no keyword argument '{}'", definition.name, extra_keywords.as_dict().items[0].first.as_string());
    }
    if (catch_varargs) {
      size_t count = definition.parameters->size();
      std::vector<Value> rest;
      for (size_t i = count; i < args.positional.size(); i++) rest.push_back(args.positional[i]);
      scope.set("varargs", Value::tuple(std::move(rest)));
    }
  }
};

}  // namespace

Value make_macro(MacroDefinition definition, BodyRenderer render) {
  auto macro = std::make_shared<Macro>(Macro{std::move(definition), std::move(render), false, false, false});
  macro->catch_varargs = body_uses_name(*macro->definition.body, "varargs");
  macro->catch_kwargs = body_uses_name(*macro->definition.body, "kwargs");
  macro->uses_caller = body_uses_name(*macro->definition.body, "caller");
  std::string name = macro->definition.name;
  return Value::function(name, [macro](const CallArgs& args) { return macro->invoke(args); });
}

}  // namespace probekit::chat
