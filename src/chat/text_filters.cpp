// The filters on text and numbers.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/access.h"
#include "chat/arguments.h"
#include "chat/filter_functions.h"
#include "chat/json_dump.h"
#include "chat/methods.h"
#include "chat/operators.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
#include "chat/value_text.h"
#include "chat/render_budget.h"

namespace probekit::chat::filters {

namespace {

// `width` spaces (none for a negative width), counted against the render's budget before they are made.
std::string spaces(int64_t width) {
  if (width <= 0) return "";
  spend_bytes(width);
  return std::string(size_t(width), ' ');
}

// Python's int() of a string in `base`: surrounding whitespace, a sign and underscores between digits allowed.
std::optional<int64_t> parse_int(std::string text, int base) {
  text = python_strip(text, std::nullopt, true, true);
  // Base 0 reads the base from the prefix as Python does: 0x, 0o, 0b, else decimal; base 2, 8 and 16 take
  // their own prefix.
  bool negative = !text.empty() && (text[0] == '-' || text[0] == '+');
  std::string sign = negative ? text.substr(0, 1) : "";
  std::string body = text.substr(sign.size());
  char prefix = body.size() > 2 && body[0] == '0' ? char(std::tolower(static_cast<unsigned char>(body[1]))) : 0;
  int prefix_base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : prefix == 'b' ? 2 : 0;
  if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
    text = sign + body.substr(2);
    base = prefix_base;
  } else if (base == 0) {
    if (body.size() > 1 && body[0] == '0') return std::nullopt;
    base = 10;
  }
  std::string digits;
  for (size_t i = 0; i < text.size(); i++) {
    bool between = i > 0 && i + 1 < text.size() && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
                   std::isalnum(static_cast<unsigned char>(text[i + 1]));
    if (text[i] == '_' && between) continue;
    digits += text[i];
  }
  if (digits.empty() || digits.find_first_of(" \t\n") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(digits.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return value;
}

// Python's float() of a string; no hex floats, which strtod would take.
std::optional<double> parse_float(const std::string& raw) {
  std::string text = python_strip(raw, std::nullopt, true, true);
  if (text.empty() || text.find_first_of("xX") != std::string::npos) return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      continue;
    }
    digits += text[i];
  }
  char* end = nullptr;
  double value = std::strtod(digits.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return value;
}

// Python's round(int, precision): itself unless the precision is negative, then to a multiple of
// 10**-precision, halves to even.
Value round_integer(int64_t value, int64_t precision) {
  if (precision >= 0) return Value(value);
  if (precision < -18) return Value(int64_t{0});
  int64_t unit = 1;
  for (int64_t i = 0; i < -precision; i++) unit *= 10;
  int64_t quotient = value / unit, remainder = value % unit;
  if (remainder < 0) quotient--, remainder += unit;
  if (2 * remainder > unit || (2 * remainder == unit && quotient % 2 != 0)) quotient++;
  return Value(quotient * unit);
}

// A filter without arguments that maps the operand's text.
Value converted(const char* filter, const Value& operand, const CallArgs& args, std::string (*convert)(std::string_view)) {
  bind_arguments(filter, args, {});
  return Value(convert(python_str(operand)));
}

std::optional<std::string> optional_text(const Value& value) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  return python_str(value);
}

}  // namespace

Value trim(const Value& operand, const CallArgs& args) {
  Value chars = bind_arguments("trim", args, {{"chars", Value(nullptr)}})[0];
  return Value(python_strip(python_str(operand), optional_text(chars), true, true));
}

Value upper(const Value& operand, const CallArgs& args) { return converted("upper", operand, args, python_upper); }

Value lower(const Value& operand, const CallArgs& args) { return converted("lower", operand, args, python_lower); }

Value capitalize(const Value& operand, const CallArgs& args) {
  return converted("capitalize", operand, args, python_capitalize);
}

Value title(const Value& operand, const CallArgs& args) { return converted("title", operand, args, jinja_title); }

Value replace(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("replace", args, {{"old", Value()}, {"new", Value()}, {"count", Value(nullptr)}}, 2);
  int64_t count = values[2].is_none() ? -1 : int_argument(values[2], "replace", "count");
  return Value(python_replace(python_str(operand), python_str(values[0]), python_str(values[1]), count));
}

// jinja2's indent: the text gets a newline appended before it is cut into lines, so a trailing newline
// stays, and empty lines are indented only with blank=True.
Value indent(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("indent", args, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
  std::string indentation = values[0].is_string() ? values[0].as_string() : spaces(int_argument(values[0], "indent", "width"));
  std::vector<std::string> lines = python_splitlines(python_str(operand) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); i++) {
    const std::string& line = lines[i];
    spend_bytes(int64_t(indentation.size() + line.size()) + 1);
    if (i > 0) out += "\n" + (truthy(values[2]) || !line.empty() ? indentation : "");
    out += line;
  }
  if (truthy(values[1])) out = indentation + out;
  return Value(out);
}

Value wordcount(const Value& operand, const CallArgs& args) {
  bind_arguments("wordcount", args, {});
  return Value(python_word_count(python_str(operand)));
}

Value string(const Value& operand, const CallArgs& args) {
  bind_arguments("string", args, {});
  return Value(python_str(operand));
}

// jinja2 marks the text safe from autoescaping, which transformers' environment never does: the text itself.
Value safe(const Value& operand, const CallArgs& args) {
  bind_arguments("safe", args, {});
  return Value(python_str(operand));
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value tojson(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("tojson", args, {{"ensure_ascii", Value(false)}, {"indent", Value(nullptr)},
                                                {"separators", Value(nullptr)}, {"sort_keys", Value(false)}});
  JsonDumpOptions options;
  options.ensure_ascii = truthy(values[0]);
  if (values[1].is_string()) options.indent = values[1].as_string();
  else if (!values[1].is_none()) options.indent = spaces(int_argument(values[1], "tojson", "indent"));
  if (!values[2].is_none()) {
    std::vector<Value> separators = iterate(values[2]);
    if (separators.size() != 2) fail_render("tojson(): separators must be an (item_separator, key_separator) pair");
    options.item_separator = string_argument(separators[0], "tojson", "separators");
    options.key_separator = string_argument(separators[1], "tojson", "separators");
  }
  options.sort_keys = truthy(values[3]);
  return Value(json_dumps(operand, options));
}

Value default_value(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("default", args, {{"default_value", Value("")}, {"boolean", Value(false)}});
  bool missing = operand.is_undefined() || (truthy(values[1]) && !truthy(operand));
  return missing ? values[0] : operand;
}

// jinja2's attr filter reads a Python attribute only: a dict's methods, not its keys.
Value attr(const Value& operand, const CallArgs& args) {
  Value name = bind_arguments("attr", args, {{"name", Value()}}, 1)[0];
  const std::string& attribute = string_argument(name, "attr", "name");
  if (operand.is_undefined()) fail_undefined(operand);
  if (std::optional<Value> method = find_method(operand, attribute)) return *method;
  if (operand.is_dict() && !operand.is_mapping()) return get_attribute(operand, attribute);
  return Value::undefined("'" + type_name(operand) + " object' has no attribute '" + attribute + "'");
}

// int(value), or int(float(value)) for text like "42.23", or the default.
Value to_int(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("int", args, {{"default", Value(0)}, {"base", Value(10)}});
  if (operand.is_undefined()) fail_undefined(operand);
  if (operand.is_int()) return operand;
  if (operand.is_bool()) return Value(int64_t{operand.as_bool()});
  std::optional<double> number;
  if (operand.is_string()) {
    if (auto parsed = parse_int(operand.as_string(), int(int_argument(values[1], "int", "base")))) return Value(*parsed);
    number = parse_float(operand.as_string());
  } else if (operand.is_float()) {
    number = operand.as_float();
  }
  if (!number || !std::isfinite(*number)) return values[0];
  // Python's int() is exact at any size; past 64 bits this fails as the template's other integer overflows do.
  const double whole = std::trunc(*number);
  if (whole < -9223372036854775808.0 || whole >= 9223372036854775808.0) {
    fail_render("integer overflow (the template's numbers are 64-bit here): int({})", *number);
  }
  return Value(static_cast<int64_t>(whole));
}

Value to_float(const Value& operand, const CallArgs& args) {
  Value fallback = bind_arguments("float", args, {{"default", Value(0.0)}})[0];
  if (operand.is_undefined()) fail_undefined(operand);
  if (operand.is_number()) return Value(operand.to_double());
  if (operand.is_string()) {
    if (auto parsed = parse_float(operand.as_string())) return Value(*parsed);
  }
  return fallback;
}

Value abs(const Value& operand, const CallArgs& args) {
  bind_arguments("abs", args, {});
  if (operand.is_float()) return Value(std::fabs(operand.as_float()));
  if (operand.is_int() || operand.is_bool()) return negate_or_keep(truthy(compare("<", operand, Value(0))) ? "-" : "+", operand);
  fail_render("bad operand type for abs(): '{}'", type_name(operand));
}

// round(value, precision, method): 'common' is Python's round() (halves to even, on the exact binary value,
// as printf rounds); 'ceil' and 'floor' scale, round and scale back, giving a float.
Value round(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("round", args, {{"precision", Value(0)}, {"method", Value("common")}});
  int64_t precision = int_argument(values[0], "round", "precision");
  std::string method = python_str(values[1]);
  if (method != "common" && method != "ceil" && method != "floor") fail_render("method must be common, ceil or floor");
  if (!operand.is_number()) fail_render("type {} doesn't define __round__ method", type_name(operand));
  if (method == "common" && !operand.is_float()) return round_integer(negate_or_keep("+", operand).as_int(), precision);
  double x = operand.to_double();
  if (method != "common") {
    double scale = std::pow(10.0, double(precision));
    return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (precision < 0) {
    double scale = std::pow(10.0, double(-precision));
    return Value(std::nearbyint(x / scale) * scale);
  }
  if (!std::isfinite(x)) return Value(x);
  int digits = int(std::min<int64_t>(precision, 400));
  std::string text(size_t(std::snprintf(nullptr, 0, "%.*f", digits, x)) + 1, '\0');
  std::snprintf(text.data(), text.size(), "%.*f", digits, x);
  return Value(std::strtod(text.c_str(), nullptr));
}

}  // namespace probekit::chat::filters
