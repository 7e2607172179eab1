#include "chat/string_methods.h"

#include <initializer_list>
#include <vector>

#include "chat/access.h"
#include "chat/arguments.h"
#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

using StringMethod = Value (*)(const char* name, const std::string& text, const CallArgs& args);

struct StringMethodRow {
  const char* name;
  StringMethod method;
};

// Most of str's methods take their arguments by position only: Python refuses str.find('a', start=1).
std::vector<Value> positional_arguments(const char* name, const CallArgs& args, std::initializer_list<Parameter> parameters,
                                        size_t required = 0) {
  if (!args.keywords.empty()) fail_render("str.{}() takes no keyword arguments", name);
  return bind_arguments(name, args, parameters, required);
}

std::optional<std::string> optional_string(const Value& value, const char* name, const char* parameter) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  return string_argument(value, name, parameter);
}

// A start or end of find, count, index and their r- forms: an int, or None for the text's start or end.
std::optional<int64_t> slice_bound(const Value& bound) {
  if (bound.is_none()) return std::nullopt;
  if (bound.is_int() || bound.is_bool()) return bound.is_bool() ? int64_t{bound.as_bool()} : bound.as_int();
  fail_render("slice indices must be integers or None or have an __index__ method");
}

// center's, ljust's and rjust's fill: one character.
char32_t fill_character(const Value& fill) {
  if (!fill.is_string()) fail_render("The fill character must be a unicode character, not {}", type_name(fill));
  std::u32string code_points = decode_utf8(fill.as_string());
  if (code_points.size() != 1) fail_render("The fill character must be exactly one character long");
  return code_points[0];
}

Value string_list(std::vector<std::string> pieces) {
  std::vector<Value> items;
  items.reserve(pieces.size());
  for (std::string& piece : pieces) items.emplace_back(std::move(piece));
  return Value::list(std::move(items));
}

// startswith/endswith take one string or a tuple of them, and the start and end of the text to look at.
template <bool at_start>
Value affix_test(const char* name, const std::string& text, const CallArgs& args) {
  auto values = positional_arguments(name, args, {{"affix", Value()}, {"start", Value(nullptr)}, {"end", Value(nullptr)}}, 1);
  const SliceBounds bounds{slice_bound(values[1]), slice_bound(values[2])};
  auto matches = [&](const Value& candidate) {
    return python_has_affix(text, string_argument(candidate, name, "affix"), bounds, !at_start);
  };
  if (!values[0].is_tuple()) return Value(matches(values[0]));
  for (const Value& candidate : values[0].as_list().items) {
    if (matches(candidate)) return Value(true);
  }
  return Value(false);
}

template <bool left, bool right>
Value strip_method(const char* name, const std::string& text, const CallArgs& args) {
  Value chars = positional_arguments(name, args, {{"chars", Value(nullptr)}})[0];
  return Value(python_strip(text, optional_string(chars, name, "chars"), left, right));
}

template <bool from_end>
Value split_method(const char* name, const std::string& text, const CallArgs& args) {
  auto values = bind_arguments(name, args, {{"sep", Value(nullptr)}, {"maxsplit", Value(-1)}});
  std::optional<std::string> sep = optional_string(values[0], name, "sep");
  if (sep && sep->empty()) fail_render("empty separator");
  int64_t maxsplit = int_argument(values[1], name, "maxsplit");
  return string_list(from_end ? python_rsplit(text, sep, maxsplit) : python_split(text, sep, maxsplit));
}

Value splitlines_method(const char* name, const std::string& text, const CallArgs& args) {
  Value keepends = bind_arguments(name, args, {{"keepends", Value(false)}})[0];
  // Python 3.12 and later take any value by its truth (3.11 took only integers): the version transformers runs on.
  return string_list(python_splitlines(text, truthy(keepends)));
}

// partition cuts at the first `sep`, rpartition at the last, into a (before, sep, after) tuple.
template <bool last>
Value partition_method(const char* name, const std::string& text, const CallArgs& args) {
  Value sep_value = positional_arguments(name, args, {{"sep", Value()}}, 1)[0];
  const std::string& sep = string_argument(sep_value, name, "sep");
  if (sep.empty()) fail_render("empty separator");
  spend_scan(text.size());
  size_t at = last ? text.rfind(sep) : text.find(sep);
  if (at == std::string::npos) return last ? Value::tuple({Value(""), Value(""), Value(text)}) : Value::tuple({Value(text), Value(""), Value("")});
  return Value::tuple({Value(text.substr(0, at)), Value(sep), Value(text.substr(at + sep.size()))});
}

template <bool prefix>
Value remove_affix_method(const char* name, const std::string& text, const CallArgs& args) {
  Value affix_value = positional_arguments(name, args, {{"affix", Value()}}, 1)[0];
  const std::string& affix = string_argument(affix_value, name, "affix");
  if (affix.size() > text.size()) return Value(text);
  if (prefix) return Value(text.compare(0, affix.size(), affix) == 0 ? text.substr(affix.size()) : text);
  size_t kept = text.size() - affix.size();
  return Value(text.compare(kept, affix.size(), affix) == 0 ? text.substr(0, kept) : text);
}

// find, rfind (last), index and rindex (raising): sub's code point index within text[start:end].
template <bool last, bool raising>
Value find_method(const char* name, const std::string& text, const CallArgs& args) {
  auto values = positional_arguments(name, args, {{"sub", Value()}, {"start", Value(nullptr)}, {"end", Value(nullptr)}}, 1);
  int64_t at = python_find(text, string_argument(values[0], name, "sub"), {slice_bound(values[1]), slice_bound(values[2])}, last);
  if (raising && at < 0) fail_render("substring not found");
  return Value(at);
}

Value count_method(const char* name, const std::string& text, const CallArgs& args) {
  auto values = positional_arguments(name, args, {{"sub", Value()}, {"start", Value(nullptr)}, {"end", Value(nullptr)}}, 1);
  return Value(python_count(text, string_argument(values[0], name, "sub"), {slice_bound(values[1]), slice_bound(values[2])}));
}

Value replace_method(const char* name, const std::string& text, const CallArgs& args) {
  auto values = positional_arguments(name, args, {{"old", Value()}, {"new", Value()}, {"count", Value(-1)}}, 2);
  return Value(python_replace(text, string_argument(values[0], name, "old"), string_argument(values[1], name, "new"),
                              int_argument(values[2], name, "count")));
}

template <Justify justify>
Value justify_method(const char* name, const std::string& text, const CallArgs& args) {
  auto values = positional_arguments(name, args, {{"width", Value()}, {"fillchar", Value(" ")}}, 1);
  return Value(python_justify(text, int_argument(values[0], name, "width"), fill_character(values[1]), justify));
}

Value zfill_method(const char* name, const std::string& text, const CallArgs& args) {
  Value width = positional_arguments(name, args, {{"width", Value()}}, 1)[0];
  return Value(python_zfill(text, int_argument(width, name, "width")));
}

Value expandtabs_method(const char* name, const std::string& text, const CallArgs& args) {
  Value tabsize = bind_arguments(name, args, {{"tabsize", Value(8)}})[0];
  return Value(python_expandtabs(text, int_argument(tabsize, name, "tabsize")));
}

Value join_method(const char* name, const std::string& text, const CallArgs& args) {
  Value iterable = positional_arguments(name, args, {{"iterable", Value()}}, 1)[0];
  std::string out;
  size_t index = 0;
  for (const Value& item : iterate(iterable)) {
    if (!item.is_string()) fail_render("sequence item {}: expected str instance, {} found", index, type_name(item));
    spend_bytes(int64_t(text.size() + item.as_string().size()));
    if (index++ > 0) out += text;
    out += item.as_string();
  }
  return Value(out);
}

template <std::string (*convert)(std::string_view)>
Value case_method(const char* name, const std::string& text, const CallArgs& args) {
  positional_arguments(name, args, {});
  return Value(convert(text));
}

template <bool (*predicate)(std::string_view)>
Value predicate_method(const char* name, const std::string& text, const CallArgs& args) {
  positional_arguments(name, args, {});
  return Value(predicate(text));
}

constexpr StringMethodRow kStringMethods[] = {
    {"startswith", affix_test<true>},
    {"endswith", affix_test<false>},
    {"strip", strip_method<true, true>},
    {"lstrip", strip_method<true, false>},
    {"rstrip", strip_method<false, true>},
    {"split", split_method<false>},
    {"rsplit", split_method<true>},
    {"splitlines", splitlines_method},
    {"partition", partition_method<false>},
    {"rpartition", partition_method<true>},
    {"removeprefix", remove_affix_method<true>},
    {"removesuffix", remove_affix_method<false>},
    {"find", find_method<false, false>},
    {"rfind", find_method<true, false>},
    {"index", find_method<false, true>},
    {"rindex", find_method<true, true>},
    {"count", count_method},
    {"replace", replace_method},
    {"center", justify_method<Justify::center>},
    {"ljust", justify_method<Justify::left>},
    {"rjust", justify_method<Justify::right>},
    {"zfill", zfill_method},
    {"expandtabs", expandtabs_method},
    {"join", join_method},
    {"upper", case_method<python_upper>},
    {"lower", case_method<python_lower>},
    {"title", case_method<python_title>},
    {"capitalize", case_method<python_capitalize>},
    {"swapcase", case_method<python_swapcase>},
    {"casefold", case_method<python_casefold>},
    {"isdigit", predicate_method<python_is_digit>},
    {"isdecimal", predicate_method<python_is_decimal>},
    {"isnumeric", predicate_method<python_is_numeric>},
    {"isidentifier", predicate_method<python_is_identifier>},
    {"isprintable", predicate_method<python_is_printable>},
    {"isascii", predicate_method<python_is_ascii>},
    {"isalpha", predicate_method<python_is_alpha>},
    {"isalnum", predicate_method<python_is_alnum>},
    {"isspace", predicate_method<python_is_space>},
    {"islower", predicate_method<python_is_lower>},
    {"isupper", predicate_method<python_is_upper>},
    {"istitle", predicate_method<python_is_title>},
};

}  // namespace

std::optional<Value> find_string_method(const Value& text, const std::string& name) {
  for (const StringMethodRow& row : kStringMethods) {
    if (name == row.name) {
      StringMethod method = row.method;
      const char* method_name = row.name;
      return Value::function(name, [text, method, method_name](const CallArgs& args) {
        return method(method_name, text.as_string(), args);
      });
    }
  }
  if (name == "format") return Value::undefined("str.format is not supported");
  return std::nullopt;
}

}  // namespace probekit::chat
