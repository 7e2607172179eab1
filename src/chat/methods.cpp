#include "chat/methods.h"

#include <array>

#include "chat/arguments.h"
#include "chat/operators.h"
#include "chat/string_methods.h"
#include "chat/template_error.h"
#include "chat/value_text.h"
#include "chat/render_budget.h"

namespace probekit::chat {

namespace {

using Method = Value (*)(const Value& self, const CallArgs& args);

struct MethodRow {
  Value::Kind kind;
  const char* name;
  Method method;
};

// keys(), values() and items() give views, which print, compare and serialize unlike lists.
template <SequenceKind view>
Value view_method(const Value& self, const CallArgs& args) {
  constexpr bool keys = view == SequenceKind::dict_keys, values = view == SequenceKind::dict_values;
  bind_arguments(keys ? "keys" : values ? "values" : "items", args, {});
  std::vector<Value> items;
  for (const auto& [key, value] : self.as_dict().items) items.push_back(keys ? key : values ? value : Value::tuple({key, value}));
  return Value::sequence(view, std::move(items));
}

Value get_method(const Value& self, const CallArgs& args) {
  auto values = bind_arguments("get", args, {{"key", Value()}, {"default", Value(nullptr)}}, 1);
  const Value* found = self.as_dict().find(values[0]);
  return found != nullptr ? *found : values[1];
}

Value index_method(const Value& self, const CallArgs& args) {
  Value needle = bind_arguments("index", args, {{"value", Value()}}, 1)[0];
  const auto& items = self.as_list().items;
  spend_steps(int64_t(items.size()));
  for (size_t i = 0; i < items.size(); i++) {
    if (python_equal(items[i], needle)) return Value(int64_t(i));
  }
  fail_render("{} is not in list", python_repr(needle));
}

Value count_method_of_list(const Value& self, const CallArgs& args) {
  Value needle = bind_arguments("count", args, {{"value", Value()}}, 1)[0];
  int64_t count = 0;
  spend_steps(int64_t(self.as_list().items.size()));
  for (const Value& item : self.as_list().items) count += python_equal(item, needle) ? 1 : 0;
  return Value(count);
}

constexpr MethodRow kMethods[] = {
    {Value::Kind::dict, "items", view_method<SequenceKind::dict_items>},
    {Value::Kind::dict, "keys", view_method<SequenceKind::dict_keys>},
    {Value::Kind::dict, "values", view_method<SequenceKind::dict_values>},
    {Value::Kind::dict, "get", get_method},
    {Value::Kind::list, "index", index_method},
    {Value::Kind::list, "count", count_method_of_list},
};

// What the immutable sandbox refuses: the methods that change a dict or a list in place.
constexpr std::array<const char*, 5> kDictMutators = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<const char*, 8> kListMutators = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool listed(const std::array<const char*, N>& names, const std::string& name) {
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

}  // namespace

std::optional<Value> find_method(const Value& object, const std::string& name) {
  if (object.is_string()) return find_string_method(object, name);
  // A namespace's attributes are only its own; a dict's view has none of a list's methods.
  bool plain = (!object.is_dict() || object.is_mapping()) && !object.is_dict_view();
  for (const MethodRow& row : kMethods) {
    if (plain && row.kind == object.kind() && name == row.name) {
      Method method = row.method;
      return Value::function(name, [object, method](const CallArgs& args) { return method(object, args); });
    }
  }
  bool is_plain_list = object.is_list_or_tuple() && !object.is_tuple();
  if ((object.is_mapping() && listed(kDictMutators, name)) || (is_plain_list && listed(kListMutators, name))) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(object) + "' object is unsafe.");
  }
  return std::nullopt;
}

}  // namespace probekit::chat
