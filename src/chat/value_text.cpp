#include "chat/value_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "chat/render_budget.h"
#include "chat/unicode_text.h"
#include "tokenizer/utf8.h"

namespace probekit::chat {

namespace {

std::string string_repr(const std::string& text) {
  bool has_single = text.find('\'') != std::string::npos;
  char quote = has_single && text.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = tokenizer::next_code_point(text, pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (is_printable(cp)) {
      tokenizer::append_utf8(out, cp);
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    }
  }
  return out + quote;
}

const char* sequence_type_name(SequenceKind kind) {
  switch (kind) {
    case SequenceKind::list: return "list";
    case SequenceKind::tuple: return "tuple";
    case SequenceKind::dict_keys: return "dict_keys";
    case SequenceKind::dict_values: return "dict_values";
    case SequenceKind::dict_items: return "dict_items";
  }
  return "list";
}

// A view prints as its type around the list of its items: dict_keys(['a', 'b']).
std::string sequence_repr(const ListData& list) {
  bool is_tuple = list.kind == SequenceKind::tuple;
  bool is_view = !is_tuple && list.kind != SequenceKind::list;
  std::string out = is_view ? std::string(sequence_type_name(list.kind)) + "([" : is_tuple ? "(" : "[";
  for (size_t i = 0; i < list.items.size(); i++) {
    if (i > 0) out += ", ";
    std::string item = python_repr(list.items[i]);
    spend_bytes(int64_t(item.size()) + 2);  // a list shared many times over prints as long as all its copies
    out += item;
  }
  if (is_tuple && list.items.size() == 1) out += ",";
  return out + (is_view ? "])" : is_tuple ? ")" : "]");
}

std::string dict_repr(const DictData& dict) {
  std::string out = "{";
  for (size_t i = 0; i < dict.items.size(); i++) {
    if (i > 0) out += ", ";
    std::string item = python_repr(dict.items[i].first) + ": " + python_repr(dict.items[i].second);
    spend_bytes(int64_t(item.size()) + 2);
    out += item;
  }
  out += "}";
  if (dict.kind == DictKind::name_space) return "<Namespace " + out + ">";
  if (dict.kind == DictKind::loop) return "<LoopContext>";
  return out;
}

}  // namespace

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);  // "-1.2345e-05": the shortest digits that read back
  size_t e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string sign = text[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t i = sign.size(); i < e; i++) {
    if (text[i] != '.') digits += text[i];
  }
  // Python switches to exponent notation below 1e-4 and from 1e16 on.
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    return fmt::format("{}{}e{}{:02d}", sign, mantissa, exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  if (digits.size() <= size_t(exponent) + 1) return sign + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  return sign + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

std::string python_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::string:
      return value.as_string();
    default:
      return python_repr(value);
  }
}

std::string python_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(value.as_int());
    case Value::Kind::floating:
      return float_repr(value.as_float());
    case Value::Kind::string:
      return string_repr(value.as_string());
    case Value::Kind::list:
      return sequence_repr(value.as_list());
    case Value::Kind::dict:
      return dict_repr(value.as_dict());
    case Value::Kind::callable:
      return "<function " + value.as_callable().name + ">";
  }
  return "";
}

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::none:
      return "NoneType";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return "str";
    case Value::Kind::list:
      return sequence_type_name(value.as_list().kind);
    case Value::Kind::dict:
      return value.as_dict().kind == DictKind::name_space ? "Namespace"
             : value.as_dict().kind == DictKind::loop    ? "LoopContext"
                                                          : "dict";
    case Value::Kind::callable:
      return "function";
  }
  return "object";
}

}  // namespace probekit::chat
