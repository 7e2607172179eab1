#include "chat/operators.h"

#include <algorithm>
#include <cmath>

#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

// bool takes part in arithmetic as the int 0 or 1, as in Python.
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t integral(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }

bool numbers_equal(const Value& a, const Value& b) {
  if (is_integral(a) && is_integral(b)) return integral(a) == integral(b);
  return a.to_double() == b.to_double();
}

// A dict's keys or items view: compared and ordered as the set of its items.
bool is_set_like(const ListData& list) {
  return list.kind == SequenceKind::dict_keys || list.kind == SequenceKind::dict_items;
}

bool is_set_like_view(const Value& value) { return value.is_list() && is_set_like(value.as_list()); }

// Every item of `a` is one of `b`'s: a view's items are distinct, so this is a <= b as sets.
bool is_subset(const ListData& a, const ListData& b) {
  spend_steps(int64_t(a.items.size()) * int64_t(b.items.size()));
  for (const Value& item : a.items) {
    if (std::none_of(b.items.begin(), b.items.end(), [&](const Value& other) { return python_equal(item, other); })) {
      return false;
    }
  }
  return true;
}

bool sequences_equal(const ListData& a, const ListData& b) {
  if (is_set_like(a) && is_set_like(b)) return a.items.size() == b.items.size() && is_subset(a, b);
  if (a.kind == SequenceKind::dict_values) return &a == &b;  // a values view is equal only to itself
  if (a.kind != b.kind || a.items.size() != b.items.size()) return false;
  spend_steps(int64_t(a.items.size()));  // lists shared many times over compare as long as all their copies
  for (size_t i = 0; i < a.items.size(); i++) {
    if (!python_equal(a.items[i], b.items[i])) return false;
  }
  return true;
}

bool dicts_equal(const DictData& a, const DictData& b) {
  if (a.kind != DictKind::plain || b.kind != DictKind::plain) return &a == &b;
  if (a.items.size() != b.items.size()) return false;
  spend_steps(int64_t(a.items.size()));
  for (const auto& [key, value] : a.items) {
    const Value* other = b.find(key);
    if (other == nullptr || !python_equal(value, *other)) return false;
  }
  return true;
}

[[noreturn]] void fail_unordered(const std::string& op, const Value& a, const Value& b) {
  fail_render("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

// Keys and items views order as sets: `a <= b` when a is a subset of b, `a < b` when a proper one.
bool views_ordered(const std::string& op, const Value& a, const Value& b) {
  if (!is_set_like_view(a) || !is_set_like_view(b)) fail_unordered(op, a, b);
  const ListData& x = a.as_list();
  const ListData& y = b.as_list();
  if (op == "<=") return is_subset(x, y);
  if (op == "<") return x.items.size() < y.items.size() && is_subset(x, y);
  if (op == ">=") return is_subset(y, x);
  return y.items.size() < x.items.size() && is_subset(y, x);
}

// The outcome of `a op b` for two orderable values of one family.
bool ordered(const std::string& op, const Value& a, const Value& b) {
  spend_steps();
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  int sign = 0;
  if (a.is_number() && b.is_number()) {
    if (!is_integral(a) || !is_integral(b)) {
      double x = a.to_double(), y = b.to_double();
      if (op == "<") return x < y;
      if (op == "<=") return x <= y;
      if (op == ">") return x > y;
      return x >= y;
    }
    sign = integral(a) < integral(b) ? -1 : integral(a) > integral(b) ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    sign = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
  } else if (a.is_dict_view() || b.is_dict_view()) {
    return views_ordered(op, a, b);
  } else if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); i++) {
      if (!python_equal(x[i], y[i])) return ordered(op, x[i], y[i]);
    }
    sign = x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  } else {
    fail_unordered(op, a, b);
  }
  if (op == "<") return sign < 0;
  if (op == "<=") return sign <= 0;
  if (op == ">") return sign > 0;
  return sign >= 0;
}

[[noreturn]] void fail_operands(const std::string& op, const Value& a, const Value& b) {
  fail_render("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// Python's ints have no bound; ours are 64-bit and refuse to wrap around.
[[noreturn]] void fail_overflow() { fail_render("integer overflow (the template's numbers are 64-bit here)"); }

Value add(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) {
    spend_bytes(int64_t(a.as_string().size() + b.as_string().size()));
    return Value(a.as_string() + b.as_string());
  }
  if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.is_tuple() == b.is_tuple()) {
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (a.is_string() || a.is_list_or_tuple()) {
    fail_render("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
  }
  fail_operands("+", a, b);
}

Value repeat(const Value& sequence, int64_t times) {
  int64_t unit = sequence.is_string() ? int64_t(sequence.as_string().size()) : 0;
  if (sequence.is_list()) {  // each copy of an item copies its text too
    for (const Value& item : sequence.as_list().items) unit += item.held_bytes();
  }
  int64_t bytes = 0;
  if (times > 0 && __builtin_mul_overflow(unit, times, &bytes)) bytes = INT64_MAX;
  spend_bytes(bytes);
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; i++) out += sequence.as_string();
    return Value(out);
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; i++) items.insert(items.end(), sequence.as_list().items.begin(), sequence.as_list().items.end());
  return sequence.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value integer_arithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflowed = false;
  if (op == "+") overflowed = __builtin_add_overflow(x, y, &r);
  if (op == "-") overflowed = __builtin_sub_overflow(x, y, &r);
  if (op == "*") overflowed = __builtin_mul_overflow(x, y, &r);
  if (overflowed) fail_overflow();
  if (op == "+" || op == "-" || op == "*") return Value(r);
  if (op == "/") {
    if (y == 0) fail_render("division by zero");
    return Value(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail_render("integer division or modulo by zero");
    int64_t quotient = x / y, remainder = x % y;
    if (remainder != 0 && ((remainder < 0) != (y < 0))) quotient--, remainder += y;
    return Value(op == "//" ? quotient : remainder);
  }
  if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
  int64_t result = 1;
  int64_t base = x;
  for (int64_t e = y; e > 0; e >>= 1) {  // by squaring: 1 ** (10 ** 18) takes 60 steps, not 10 ** 18
    if ((e & 1) != 0 && __builtin_mul_overflow(result, base, &result)) fail_overflow();
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail_overflow();
  }
  return Value(result);
}

Value float_arithmetic(const std::string& op, double x, double y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) fail_render(op == "/" ? "float division by zero" : op == "//" ? "float floor division by zero" : "float modulo");
  if (op == "/") return Value(x / y);
  double remainder = std::fmod(x, y);
  if (remainder != 0 && ((remainder < 0) != (y < 0))) remainder += y;
  if (op == "%") return Value(remainder);
  // Python's float floor division: (x - x mod y) / y is a whole number up to rounding, taken to the nearest.
  double quotient = (x - remainder) / y;
  double floored = std::floor(quotient);
  return Value(quotient - floored > 0.5 ? floored + 1.0 : floored);
}

}  // namespace

void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  fail_render("{}", hint.empty() ? "undefined value" : hint);
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
      return value.as_bool();
    case Value::Kind::integer:
      return value.as_int() != 0;
    case Value::Kind::floating:
      return value.as_float() != 0.0;
    case Value::Kind::string:
      return !value.as_string().empty();
    case Value::Kind::list:
      return !value.as_list().items.empty();
    case Value::Kind::dict:
      return value.as_dict().kind != DictKind::plain || !value.as_dict().items.empty();
    case Value::Kind::callable:
      return true;
  }
  return false;
}

bool python_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.as_string() == b.as_string();
    case Value::Kind::list:
      return sequences_equal(a.as_list(), b.as_list());
    case Value::Kind::dict:
      return dicts_equal(a.as_dict(), b.as_dict());
    default:
      return a.same_object(b);
  }
}

bool python_less(const Value& a, const Value& b) { return ordered("<", a, b); }

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return python_equal(a, b);
  if (op == "!=") return !python_equal(a, b);
  return ordered(op, a, b);
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string()) fail_render("'in <string>' requires string as left operand, not {}", type_name(needle));
    spend_scan(haystack.as_string().size());
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    spend_steps(int64_t(haystack.as_list().items.size()));
    for (const Value& item : haystack.as_list().items) {
      if (python_equal(item, needle)) return true;
    }
    return false;
  }
  if (haystack.is_mapping()) return haystack.as_dict().find(needle) != nullptr;
  if (haystack.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  fail_render("argument of type '{}' is not iterable", type_name(haystack));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) return integer_arithmetic(op, integral(a), integral(b));
    return float_arithmetic(op, a.to_double(), b.to_double());
  }
  if (op == "+") return add(a, b);
  if (op == "*" && (a.is_string() || a.is_list_or_tuple()) && is_integral(b)) return repeat(a, integral(b));
  if (op == "*" && (b.is_string() || b.is_list_or_tuple()) && is_integral(a)) return repeat(b, integral(a));
  if (op == "-" && (is_set_like_view(a) || is_set_like_view(b))) {
    fail_render("'-' with a dict's keys() or items() gives a set, which chat templates here do not have");
  }
  if (op == "%" && a.is_string()) fail_render("string formatting with % is not supported");
  fail_operands(op, a, b);
}

Value negate_or_keep(const std::string& op, const Value& operand) {
  if (operand.is_undefined()) fail_undefined(operand);
  if (!operand.is_number()) fail_render("bad operand type for unary {}: '{}'", op, type_name(operand));
  if (op == "+") return operand.is_bool() ? Value(integral(operand)) : operand;
  if (operand.is_float()) return Value(-operand.as_float());
  return integer_arithmetic("-", 0, integral(operand));
}

Value concatenate(const Value& a, const Value& b) {
  std::string left = python_str(a), right = python_str(b);
  spend_bytes(int64_t(left.size() + right.size()));
  return Value(left + right);
}

}  // namespace probekit::chat
