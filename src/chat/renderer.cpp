#include "chat/renderer.h"

#include "chat/access.h"
#include "chat/evaluator.h"
#include "chat/macro.h"
#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

enum class Flow { normal, break_loop, continue_loop };

void append(std::string& out, const std::string& text) {
  spend_bytes(int64_t(text.size()));
  out += text;
}

// Binds `targets` to `value`: one name takes it whole, several unpack it as Python does.
void assign(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return;
  }
  if (!value.is_string() && !value.is_list() && !value.is_mapping() && !value.is_undefined()) {
    fail_render("cannot unpack non-iterable {} object", type_name(value));
  }
  std::vector<Value> parts = iterate(value);
  if (parts.size() < targets.size()) {
    fail_render("not enough values to unpack (expected {}, got {})", targets.size(), parts.size());
  }
  if (parts.size() > targets.size()) fail_render("too many values to unpack (expected {})", targets.size());
  for (size_t i = 0; i < targets.size(); i++) scope.set(targets[i], parts[i]);
}

// jinja2's `loop` for iteration `index` of `items`.
Value loop_variable(const std::vector<Value>& items, size_t index) {
  int64_t i = int64_t(index), n = int64_t(items.size());
  Value loop = Value::dict(DictKind::loop);
  DictData& d = loop.as_dict();
  d.set(Value("index"), Value(i + 1));
  d.set(Value("index0"), Value(i));
  d.set(Value("revindex"), Value(n - i));
  d.set(Value("revindex0"), Value(n - i - 1));
  d.set(Value("first"), Value(i == 0));
  d.set(Value("last"), Value(i == n - 1));
  d.set(Value("length"), Value(n));
  d.set(Value("depth"), Value(1));
  d.set(Value("depth0"), Value(0));
  d.set(Value("previtem"), i > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
  d.set(Value("nextitem"), i + 1 < n ? items[index + 1] : Value::undefined("there is no next item"));
  d.set(Value("cycle"), Value::function("cycle", [i](const CallArgs& args) {
          if (args.positional.empty()) fail_render("no items for cycling given");
          return args.positional[size_t(i) % args.positional.size()];
        }));
  return loop;
}

class Renderer {
 public:
  std::string render_body(const Body& body, const ScopePtr& scope) {
    std::string out;
    execute(body, scope, out);
    return out;
  }

 private:
  // Scopes that define macros, kept until the render ends: a macro holds its scope weakly (it is a variable
  // of that scope, and a strong pointer would be a cycle that is never freed).
  std::vector<ScopePtr> macro_scopes_;

  Flow execute(const Body& body, const ScopePtr& scope, std::string& out) {
    RenderNesting nesting;
    for (const StmtPtr& stmt : body) {
      Flow flow = Flow::normal;
      try {
        spend_steps();
        flow = execute(*stmt, scope, out);
      } catch (const TemplateError& e) {
        if (e.line() != 0) throw;
        e.rethrow_at(stmt->line);
      }
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow execute(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    switch (stmt.kind) {
      case StmtKind::text: append(out, stmt.text); break;
      case StmtKind::output: append(out, python_str(evaluate(*stmt.expr, *scope))); break;
      case StmtKind::if_chain: return if_chain(stmt, scope, out);
      case StmtKind::for_loop: for_loop(stmt, scope, out); break;
      case StmtKind::set: set(stmt, *scope); break;
      case StmtKind::set_block: set_block(stmt, scope); break;
      case StmtKind::macro: scope->set(stmt.text, macro(stmt.text, stmt, scope)); break;
      case StmtKind::call_block: append(out, call_block(stmt, scope)); break;
      case StmtKind::filter_block:
        append(out, python_str(apply_filter_chain(*stmt.expr, Value(render_body(stmt.bodies[0], scope)), *scope)));
        break;
      case StmtKind::with_block: return with_block(stmt, scope, out);
      case StmtKind::break_loop: return Flow::break_loop;
      case StmtKind::continue_loop: return Flow::continue_loop;
      case StmtKind::generation: return execute(stmt.bodies[0], scope, out);
    }
    return Flow::normal;
  }

  Flow if_chain(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    for (size_t i = 0; i < stmt.bodies.size(); i++) {
      if (i >= stmt.exprs.size() || truthy(evaluate(*stmt.exprs[i], *scope))) return execute(stmt.bodies[i], scope, out);
    }
    return Flow::normal;
  }

  // Each iteration runs in a scope of its own; the loop filter (`for x in xs if c`) picks the items first, so
  // loop.length and loop.last count only those.
  void for_loop(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    std::vector<Value> items = iterate(evaluate(*stmt.expr, *scope));
    if (stmt.condition) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Scope probe(scope);
        assign(probe, stmt.targets, item);
        if (truthy(evaluate(*stmt.condition, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      execute(stmt.bodies[1], std::make_shared<Scope>(scope), out);
      return;
    }
    for (size_t i = 0; i < items.size(); i++) {
      spend_steps();  // an empty body still costs its iterations
      auto iteration = std::make_shared<Scope>(scope);
      assign(*iteration, stmt.targets, items[i]);
      iteration->set("loop", loop_variable(items, i));
      if (execute(stmt.bodies[0], iteration, out) == Flow::break_loop) break;
    }
  }

  void set(const Stmt& stmt, Scope& scope) {
    Value value = evaluate(*stmt.expr, scope);
    const std::string& target = stmt.targets[0];
    size_t dot = target.find('.');
    if (dot == std::string::npos) return assign(scope, stmt.targets, value);
    Value ns = scope.lookup(target.substr(0, dot));
    if (!ns.is_dict() || ns.as_dict().kind != DictKind::name_space) {
      fail_render("Cannot assign attribute on non-namespace object");
    }
    ns.as_dict().set(Value(target.substr(dot + 1)), std::move(value));
  }

  void set_block(const Stmt& stmt, const ScopePtr& scope) {
    Value text(render_body(stmt.bodies[0], scope));
    assign(*scope, stmt.targets, stmt.expr ? apply_filter_chain(*stmt.expr, text, *scope) : text);
  }

  Value macro(const std::string& name, const Stmt& stmt, const ScopePtr& scope) {
    if (macro_scopes_.empty() || macro_scopes_.back() != scope) macro_scopes_.push_back(scope);
    MacroDefinition definition{name, &stmt.parameters, &stmt.bodies[0], scope};
    return make_macro(std::move(definition), [this](const Body& body, const ScopePtr& s) { return render_body(body, s); });
  }

  // {% call(params) f(args) %}body{% endcall %}: f gets `caller`, which renders the body.
  std::string call_block(const Stmt& stmt, const ScopePtr& scope) {
    const Expr& call = *stmt.expr;
    CallArgs args = evaluate_arguments(call, 1, *scope);
    args.keywords.emplace_back("caller", macro("caller", stmt, scope));
    return python_str(call_value(evaluate(*call.items[0], *scope), args));
  }

  Flow with_block(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    auto inner = std::make_shared<Scope>(scope);
    for (size_t i = 0; i < stmt.targets.size(); i++) inner->set(stmt.targets[i], evaluate(*stmt.exprs[i], *scope));
    return execute(stmt.bodies[0], inner, out);
  }
};

}  // namespace

std::string render_template(const TemplateAst& ast, const ScopePtr& root) { return Renderer().render_body(ast.body, root); }

}  // namespace probekit::chat
