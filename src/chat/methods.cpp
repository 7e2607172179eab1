#include "chat/methods.h"

#include <array>

#include "chat/access.h"
#include "chat/arguments.h"
#include "chat/operators.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
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

std::optional<std::string> optional_string(const Value& value, const char* function, const char* parameter) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  return string_argument(value, function, parameter);
}

// startswith/endswith take one string or a tuple of them.
template <bool at_start>
Value affix_test(const Value& self, const CallArgs& args) {
  const char* function = at_start ? "startswith" : "endswith";
  Value affix = bind_arguments(function, args, {{"affix", Value()}}, 1)[0];
  const std::string& text = self.as_string();
  auto matches = [&](const Value& candidate) {
    const std::string& a = string_argument(candidate, function, "affix");
    if (a.size() > text.size()) return false;
    return at_start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (!affix.is_tuple()) return Value(matches(affix));
  for (const Value& candidate : affix.as_list().items) {
    if (matches(candidate)) return Value(true);
  }
  return Value(false);
}

template <bool left, bool right>
Value strip_method(const Value& self, const CallArgs& args) {
  const char* function = left && right ? "strip" : left ? "lstrip" : "rstrip";
  Value chars = bind_arguments(function, args, {{"chars", Value(nullptr)}})[0];
  return Value(python_strip(self.as_string(), optional_string(chars, function, "chars"), left, right));
}

Value split_method(const Value& self, const CallArgs& args) {
  auto values = bind_arguments("split", args, {{"sep", Value(nullptr)}, {"maxsplit", Value(-1)}});
  std::optional<std::string> sep = optional_string(values[0], "split", "sep");
  if (sep && sep->empty()) fail_render("empty separator");
  std::vector<Value> pieces;
  for (std::string& piece : python_split(self.as_string(), sep, int_argument(values[1], "split", "maxsplit"))) {
    pieces.emplace_back(std::move(piece));
  }
  return Value::list(std::move(pieces));
}

template <std::string (*convert)(std::string_view)>
Value case_method(const Value& self, const CallArgs& args) {
  bind_arguments("str method", args, {});
  return Value(convert(self.as_string()));
}

template <bool (*predicate)(std::string_view)>
Value predicate_method(const Value& self, const CallArgs& args) {
  bind_arguments("str method", args, {});
  return Value(predicate(self.as_string()));
}

Value replace_method(const Value& self, const CallArgs& args) {
  auto values = bind_arguments("replace", args, {{"old", Value()}, {"new", Value()}, {"count", Value(-1)}}, 2);
  return Value(python_replace(self.as_string(), string_argument(values[0], "replace", "old"),
                              string_argument(values[1], "replace", "new"), int_argument(values[2], "replace", "count")));
}

Value find_method_of_str(const Value& self, const CallArgs& args) {
  Value sub = bind_arguments("find", args, {{"sub", Value()}}, 1)[0];
  return Value(python_find(self.as_string(), string_argument(sub, "find", "sub")));
}

Value count_method_of_str(const Value& self, const CallArgs& args) {
  Value sub = bind_arguments("count", args, {{"sub", Value()}}, 1)[0];
  return Value(python_count(self.as_string(), string_argument(sub, "count", "sub")));
}

Value join_method(const Value& self, const CallArgs& args) {
  Value iterable = bind_arguments("join", args, {{"iterable", Value()}}, 1)[0];
  std::string out;
  size_t index = 0;
  for (const Value& item : iterate(iterable)) {
    if (!item.is_string()) fail_render("sequence item {}: expected str instance, {} found", index, type_name(item));
    spend_bytes(int64_t(self.as_string().size() + item.as_string().size()));
    if (index++ > 0) out += self.as_string();
    out += item.as_string();
  }
  return Value(out);
}

Value items_method(const Value& self, const CallArgs& args) {
  bind_arguments("items", args, {});
  std::vector<Value> pairs;
  for (const auto& [key, value] : self.as_dict().items) pairs.push_back(Value::tuple({key, value}));
  return Value::list(std::move(pairs));
}

template <bool keys>
Value keys_or_values_method(const Value& self, const CallArgs& args) {
  bind_arguments(keys ? "keys" : "values", args, {});
  std::vector<Value> out;
  for (const auto& [key, value] : self.as_dict().items) out.push_back(keys ? key : value);
  return Value::list(std::move(out));
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
    {Value::Kind::string, "startswith", affix_test<true>},
    {Value::Kind::string, "endswith", affix_test<false>},
    {Value::Kind::string, "strip", strip_method<true, true>},
    {Value::Kind::string, "lstrip", strip_method<true, false>},
    {Value::Kind::string, "rstrip", strip_method<false, true>},
    {Value::Kind::string, "split", split_method},
    {Value::Kind::string, "upper", case_method<python_upper>},
    {Value::Kind::string, "lower", case_method<python_lower>},
    {Value::Kind::string, "title", case_method<python_title>},
    {Value::Kind::string, "capitalize", case_method<python_capitalize>},
    {Value::Kind::string, "replace", replace_method},
    {Value::Kind::string, "isdigit", predicate_method<python_is_digit>},
    {Value::Kind::string, "isalpha", predicate_method<python_is_alpha>},
    {Value::Kind::string, "isalnum", predicate_method<python_is_alnum>},
    {Value::Kind::string, "isspace", predicate_method<python_is_space>},
    {Value::Kind::string, "islower", predicate_method<python_is_lower>},
    {Value::Kind::string, "isupper", predicate_method<python_is_upper>},
    {Value::Kind::string, "find", find_method_of_str},
    {Value::Kind::string, "count", count_method_of_str},
    {Value::Kind::string, "join", join_method},
    {Value::Kind::dict, "items", items_method},
    {Value::Kind::dict, "keys", keys_or_values_method<true>},
    {Value::Kind::dict, "values", keys_or_values_method<false>},
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
  bool plain = !object.is_dict() || object.is_mapping();  // a namespace's attributes are only its own
  for (const MethodRow& row : kMethods) {
    if (plain && row.kind == object.kind() && name == row.name) {
      Method method = row.method;
      return Value::function(name, [object, method](const CallArgs& args) { return method(object, args); });
    }
  }
  if ((object.is_mapping() && listed(kDictMutators, name)) || (object.is_list() && !object.is_tuple() && listed(kListMutators, name))) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(object) + "' object is unsafe.");
  }
  if (object.is_string() && name == "format") return Value::undefined("str.format is not supported");
  return std::nullopt;
}

}  // namespace probekit::chat
