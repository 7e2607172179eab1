#include "chat/json_dump.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "chat/value_text.h"
#include "tokenizer/utf8.h"

namespace probekit::chat {

namespace {

struct Writer {
  const JsonDumpOptions& options;
  std::string item_separator;
  std::string key_separator;
  std::string out;

  void newline(int depth) {
    if (!options.indent) return;
    spend_bytes(1 + int64_t(depth * options.indent->size()));
    out += '\n';
    for (int i = 0; i < depth; i++) out += *options.indent;
  }

  void write_code_unit(uint32_t unit) {
    spend_bytes(6);
    out += fmt::format("\\u{:04x}", unit);
  }

  // A key or a value: a dict shared many times over prints its keys as often as it is shared.
  void write_string(const std::string& text) {
    spend_scan(text.size());
    spend_bytes(int64_t(text.size()) + 2);
    out += '"';
    for (size_t pos = 0; pos < text.size();) {
      size_t start = pos;
      char32_t cp = tokenizer::next_code_point(text, pos);
      switch (cp) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
      }
      if (cp < 0x20) {
        write_code_unit(cp);
      } else if (options.ensure_ascii && cp >= 0x7F) {
        if (cp >= 0x10000) {  // a surrogate pair, as json.dumps writes astral characters
          write_code_unit(0xD800 + ((cp - 0x10000) >> 10));
          write_code_unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
          write_code_unit(cp);
        }
      } else {
        out.append(text, start, pos - start);
      }
    }
    out += '"';
  }

  void write_float(double value) {
    if (std::isnan(value)) out += "NaN";
    else if (std::isinf(value)) out += value < 0 ? "-Infinity" : "Infinity";
    else out += float_repr(value);
  }

  // json.dumps turns keys into strings: str as is, numbers and booleans as their JSON text, None as "null".
  std::string key_text(const Value& key) {
    if (key.is_string()) return key.as_string();
    if (key.is_bool()) return key.as_bool() ? "true" : "false";
    if (key.is_none()) return "null";
    if (key.is_int()) return std::to_string(key.as_int());
    if (key.is_float()) return float_repr(key.as_float());
    fail_render("keys must be str, int, float, bool or None, not {}", type_name(key));
  }

  void write_list(const ListData& list, int depth) {
    if (list.items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < list.items.size(); i++) {
      if (i > 0) out += item_separator;
      newline(depth + 1);
      write(list.items[i], depth + 1);
    }
    newline(depth);
    out += ']';
  }

  void write_dict(const DictData& dict, int depth) {
    if (dict.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [key, value] : dict.items) entries.emplace_back(key_text(key), &value);
    if (options.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); i++) {
      if (i > 0) out += item_separator;
      newline(depth + 1);
      write_string(entries[i].first);
      out += key_separator;
      write(*entries[i].second, depth + 1);
    }
    newline(depth);
    out += '}';
  }

  void write(const Value& value, int depth) {
    spend_steps();
    spend_bytes(int64_t(item_separator.size() + key_separator.size()) + 8);
    switch (value.kind()) {
      case Value::Kind::none: out += "null"; return;
      case Value::Kind::boolean: out += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::integer: out += std::to_string(value.as_int()); return;
      case Value::Kind::floating: write_float(value.as_float()); return;
      case Value::Kind::string: write_string(value.as_string()); return;
      default: break;
    }
    if (value.is_list_or_tuple()) return write_list(value.as_list(), depth);
    if (!value.is_mapping()) fail_render("Object of type {} is not JSON serializable", type_name(value));
    write_dict(value.as_dict(), depth);
  }
};

}  // namespace

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  Writer writer{options, options.item_separator.value_or(options.indent ? "," : ", "),
                options.key_separator.value_or(": "), {}};
  writer.write(value, 0);
  return std::move(writer.out);
}

}  // namespace probekit::chat
