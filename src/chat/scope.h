// The variables visible at a point of a template. As in jinja2, each for-loop iteration, macro call and with
// block opens a scope over the one around it, and `set` writes into the innermost one: a variable set inside
// a loop is gone after the iteration, which is why templates carry state out of loops in a namespace().
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "chat/value.h"

namespace probekit::chat {

class Scope {
 public:
  explicit Scope(std::shared_ptr<const Scope> parent = nullptr) : parent_(std::move(parent)) {}

  /// The variable, or an Undefined that says "'name' is undefined".
  Value lookup(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
      auto found = scope->variables_.find(name);
      if (found != scope->variables_.end()) return found->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void set(const std::string& name, Value value) { variables_[name] = std::move(value); }

 private:
  std::shared_ptr<const Scope> parent_;
  std::unordered_map<std::string, Value> variables_;
};

using ScopePtr = std::shared_ptr<Scope>;

}  // namespace probekit::chat
