#include "chat/access.h"

#include "chat/methods.h"
#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

// jinja2's object_type_repr: how its Undefined names the object something is missing from ("dict object",
// "None"). A missing attribute quotes it, a missing element does not.
std::string object_type_repr(const Value& object) {
  if (object.is_none()) return "None";
  if (object.is_dict() && object.as_dict().kind == DictKind::name_space) return "jinja2.utils.Namespace object";
  if (object.is_dict() && object.as_dict().kind == DictKind::loop) return "jinja2.runtime.LoopContext object";
  return type_name(object) + " object";
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined("'" + object_type_repr(object) + "' has no attribute '" + name + "'");
}

Value missing_element(const Value& object, const Value& key) {
  return Value::undefined(object_type_repr(object) + " has no element " + python_repr(key));
}

// Python's index into a sequence of `size`, negative from the end; -1 when out of range.
int64_t resolve_index(int64_t index, int64_t size) {
  if (index < 0) index += size;
  return index < 0 || index >= size ? -1 : index;
}

int64_t slice_bound(const Value& bound, int64_t fallback, int64_t lower, int64_t upper, int64_t size) {
  if (bound.is_undefined() || bound.is_none()) return fallback;
  if (!bound.is_int() && !bound.is_bool()) fail_render("slice indices must be integers or None");
  int64_t value = bound.is_bool() ? int64_t{bound.as_bool()} : bound.as_int();
  if (value < 0) value += size;
  return value < lower ? lower : value > upper ? upper : value;
}

// The positions a slice picks from a sequence of `size`, as Python's slice.indices() walks them.
std::vector<int64_t> slice_positions(int64_t size, const Value& start, const Value& stop, const Value& step_value) {
  int64_t step = 1;
  if (!step_value.is_undefined() && !step_value.is_none()) {
    if (!step_value.is_int()) fail_render("slice indices must be integers or None");
    step = step_value.as_int();
    if (step == 0) fail_render("slice step cannot be zero");
  }
  int64_t lower = step < 0 ? -1 : 0;
  int64_t upper = step < 0 ? size - 1 : size;
  int64_t first = slice_bound(start, step < 0 ? upper : lower, lower, upper, size);
  int64_t last = slice_bound(stop, step < 0 ? lower : upper, lower, upper, size);
  std::vector<int64_t> positions;
  for (int64_t i = first; step > 0 ? i < last : i > last; i += step) positions.push_back(i);
  return positions;
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (std::optional<Value> method = find_method(object, name)) return *method;
  // A namespace's or a loop's attributes are their items.
  if (object.is_dict()) {
    if (const Value* found = object.as_dict().find(Value(name))) return *found;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_list_or_tuple() && (key.is_int() || key.is_bool())) {
    const auto& items = object.as_list().items;
    int64_t at = resolve_index(key.is_bool() ? int64_t{key.as_bool()} : key.as_int(), int64_t(items.size()));
    return at < 0 ? missing_element(object, key) : items[at];
  }
  if (object.is_string() && (key.is_int() || key.is_bool())) {
    std::u32string cps = decode_utf8(object.as_string());
    int64_t at = resolve_index(key.is_bool() ? int64_t{key.as_bool()} : key.as_int(), int64_t(cps.size()));
    return at < 0 ? missing_element(object, key) : Value(encode_utf8(cps.substr(at, 1)));
  }
  if (object.is_mapping()) {
    if (const Value* found = object.as_dict().find(key)) return *found;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return missing_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_string()) {
    std::u32string cps = decode_utf8(object.as_string());
    std::u32string picked;
    for (int64_t i : slice_positions(int64_t(cps.size()), start, stop, step)) picked += cps[i];
    return Value(encode_utf8(picked));
  }
  // jinja2 slices with Python's own [], not through its getitem: what cannot be sliced fails, not Undefined.
  if (object.is_mapping()) fail_render("unhashable type: 'slice'");
  if (!object.is_list_or_tuple()) fail_render("'{}' object is not subscriptable", type_name(object));
  const auto& items = object.as_list().items;
  std::vector<Value> picked;
  for (int64_t i : slice_positions(int64_t(items.size()), start, stop, step)) picked.push_back(items[i]);
  return object.is_tuple() ? Value::tuple(std::move(picked)) : Value::list(std::move(picked));
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      spend_steps(int64_t(value.as_list().items.size()));
      return value.as_list().items;
    case Value::Kind::string: {
      spend_bytes(int64_t(value.as_string().size() * sizeof(Value)));  // a Value per character, made before use
      spend_steps(int64_t(value.as_string().size()));
      std::vector<Value> characters;
      for (char32_t cp : decode_utf8(value.as_string())) characters.emplace_back(encode_utf8(std::u32string(1, cp)));
      return characters;
    }
    default:
      if (value.is_mapping()) {
        spend_steps(int64_t(value.as_dict().items.size()));
        std::vector<Value> keys;
        for (const auto& item : value.as_dict().items) keys.push_back(item.first);
        return keys;
      }
      fail_render("'{}' object is not iterable", type_name(value));
  }
}

int64_t length(const Value& value) {
  if (value.is_undefined()) return 0;
  if (value.is_string()) return code_point_length(value.as_string());
  if (value.is_list()) return int64_t(value.as_list().items.size());
  if (value.is_mapping()) return int64_t(value.as_dict().items.size());
  fail_render("object of type '{}' has no len()", type_name(value));
}

}  // namespace probekit::chat
