#include "chat/globals.h"

#include <ctime>

#include "chat/access.h"
#include "chat/arguments.h"
#include "chat/template_error.h"
#include "chat/value_text.h"

namespace probekit::chat {

namespace {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

Value range(const CallArgs& args) {
  if (!args.keywords.empty()) fail_render("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) fail_render("range expected 1 to 3 arguments, got {}", args.positional.size());
  std::vector<int64_t> bounds;
  for (const Value& arg : args.positional) bounds.push_back(int_argument(arg, "range", "bound"));
  int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) fail_render("range() arg 3 must not be zero");
  int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0) : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (count > kMaxRange) fail_render("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  std::vector<Value> items;
  for (int64_t i = 0; i < count; i++) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

// dict(mapping or pairs, key=value, ...) and namespace(...) take the same arguments.
void fill_dict(DictData& dict, const CallArgs& args, const char* function) {
  if (args.positional.size() > 1) fail_render("{} expected at most 1 argument, got {}", function, args.positional.size());
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_mapping()) {
      for (const auto& [key, value] : source.as_dict().items) dict.set(key, value);
    } else {
      for (const Value& pair : iterate(source)) {
        std::vector<Value> parts = iterate(pair);
        if (parts.size() != 2) fail_render("{} update sequence element has length {}; 2 is required", function, parts.size());
        dict.set(parts[0], parts[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keywords) dict.set(Value(key), value);
}

Value make_dict(const CallArgs& args) {
  Value dict = Value::dict();
  fill_dict(dict.as_dict(), args, "dict");
  return dict;
}

Value make_namespace(const CallArgs& args) {
  Value ns = Value::dict(DictKind::name_space);
  fill_dict(ns.as_dict(), args, "namespace");
  return ns;
}

Value raise_exception(const CallArgs& args) {
  Value message = bind_arguments("raise_exception", args, {{"message", Value()}}, 1)[0];
  throw TemplateRaised(python_str(message));
}

// datetime.now().strftime(format): the local time.
Value strftime_now(const CallArgs& args) {
  Value format = bind_arguments("strftime_now", args, {{"format", Value()}}, 1)[0];
  const std::string& pattern = string_argument(format, "strftime_now", "format");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256 + pattern.size() * 16, '\0');
  out.resize(std::strftime(out.data(), out.size(), pattern.c_str(), &local));
  return Value(out);
}

Value refused(const std::string& name) {
  return Value::function(name, [name](const CallArgs&) -> Value { fail_render("'{}' is not supported in chat templates", name); });
}

}  // namespace

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", range));
  scope.set("dict", Value::function("dict", make_dict));
  scope.set("namespace", Value::function("namespace", make_namespace));
  scope.set("raise_exception", Value::function("raise_exception", raise_exception));
  scope.set("strftime_now", Value::function("strftime_now", strftime_now));
  for (const char* name : {"cycler", "joiner", "lipsum"}) scope.set(name, refused(name));
}

}  // namespace probekit::chat
