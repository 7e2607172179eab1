// The filters on lists, dicts and other iterables.
#include <algorithm>

#include "chat/access.h"
#include "chat/arguments.h"
#include "chat/filter_functions.h"
#include "chat/filters.h"
#include "chat/is_tests.h"
#include "chat/operators.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"
#include "chat/value_text.h"
#include "chat/render_budget.h"

namespace probekit::chat::filters {

namespace {

// jinja2's attribute getter: "a.b.0" looks up a, then b, then item 0 (parts made of digits are numbers).
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  for (std::string& part : python_split(path, std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = get_item(current, digits ? Value(int64_t(std::stoll(part))) : Value(part));
  }
  return current;
}

// The key a sort, unique, min or max compares: the item or its attribute(s), lower-cased unless
// case-sensitive. A comma-separated list of attributes compares as a tuple.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  auto fold = [&](const Value& v) { return !case_sensitive && v.is_string() ? Value(python_lower(v.as_string())) : v; };
  if (attribute.is_none() || attribute.is_undefined()) return fold(item);
  if (!attribute.is_string()) return fold(get_item(item, attribute));
  std::vector<std::string> parts = python_split(attribute.as_string(), std::string(","), -1);
  if (parts.size() == 1) return fold(attribute_path(item, parts[0]));
  std::vector<Value> keys;
  for (const std::string& part : parts) keys.push_back(fold(attribute_path(item, python_strip(part, std::nullopt, true, true))));
  return Value::tuple(std::move(keys));
}

// Python's min() or max(): the first of the smallest or the largest.
Value extreme(const char* function, const Value& operand, const CallArgs& args, bool largest) {
  auto values = bind_arguments(function, args, {{"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  std::vector<Value> items = iterate(operand);
  if (items.empty()) return Value::undefined(largest ? "No largest item, sequence was empty." : "No smallest item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], values[1], truthy(values[0]));
  for (size_t i = 1; i < items.size(); i++) {
    Value key = sort_key(items[i], values[1], truthy(values[0]));
    if (largest ? python_less(best_key, key) : python_less(key, best_key)) best = i, best_key = key;
  }
  return items[best];
}

// select, reject, selectattr and rejectattr: keep the items whose (attribute's) test result is `keep`.
Value select_or_reject(const Value& operand, const CallArgs& args, bool keep, bool by_attribute) {
  size_t offset = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty()) fail_render("Missing parameter for attribute name");
  CallArgs test_args;
  test_args.keywords = args.keywords;
  if (args.positional.size() > offset + 1) {
    test_args.positional.assign(args.positional.begin() + long(offset) + 1, args.positional.end());
  }
  std::vector<Value> kept;
  for (const Value& item : iterate(operand)) {
    Value subject = by_attribute ? attribute_path(item, python_str(args.positional[0])) : item;
    bool passed = args.positional.size() > offset
                      ? apply_test(python_str(args.positional[offset]), subject, test_args)
                      : truthy(subject);
    if (passed == keep) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

void stable_sort(std::vector<Value>& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? python_less(keys[b], keys[a]) : python_less(keys[a], keys[b]);
  });
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

}  // namespace

Value length(const Value& operand, const CallArgs& args) {
  bind_arguments("length", args, {});
  return Value(chat::length(operand));
}

Value first(const Value& operand, const CallArgs& args) {
  bind_arguments("first", args, {});
  std::vector<Value> items = iterate(operand);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value last(const Value& operand, const CallArgs& args) {
  bind_arguments("last", args, {});
  std::vector<Value> items = iterate(operand);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value join(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("join", args, {{"d", Value("")}, {"attribute", Value(nullptr)}});
  std::string out;
  bool first_item = true;
  for (const Value& item : iterate(operand)) {
    std::string text = python_str(values[1].is_none() ? item : attribute_path(item, python_str(values[1])));
    std::string separator = first_item ? "" : python_str(values[0]);
    spend_bytes(int64_t(separator.size() + text.size()));
    out += separator;
    out += text;
    first_item = false;
  }
  return Value(out);
}

Value list(const Value& operand, const CallArgs& args) {
  bind_arguments("list", args, {});
  return Value::list(iterate(operand));
}

Value items(const Value& operand, const CallArgs& args) {
  bind_arguments("items", args, {});
  if (operand.is_undefined()) return Value::list({});
  if (!operand.is_mapping()) fail_render("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : operand.as_dict().items) pairs.push_back(Value::tuple({key, value}));
  return Value::list(std::move(pairs));
}

Value reverse(const Value& operand, const CallArgs& args) {
  bind_arguments("reverse", args, {});
  if (operand.is_string()) {
    std::u32string cps = decode_utf8(operand.as_string());
    return Value(encode_utf8(std::u32string(cps.rbegin(), cps.rend())));
  }
  std::vector<Value> items = iterate(operand);
  return Value::list(std::vector<Value>(items.rbegin(), items.rend()));
}

Value sort(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("sort", args, {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  std::vector<Value> items = iterate(operand);
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(sort_key(item, values[2], truthy(values[1])));
  stable_sort(items, keys, truthy(values[0]));
  return Value::list(std::move(items));
}

Value dictsort(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("dictsort", args, {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
  std::string by = python_str(values[1]);
  if (by != "key" && by != "value") fail_render("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs = filters::items(operand, {}).as_list().items;
  std::vector<Value> keys;
  for (const Value& pair : pairs) keys.push_back(sort_key(pair.as_list().items[by == "key" ? 0 : 1], Value(nullptr), truthy(values[0])));
  stable_sort(pairs, keys, truthy(values[2]));
  return Value::list(std::move(pairs));
}

Value unique(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("unique", args, {{"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  std::vector<Value> kept;
  std::vector<Value> seen;
  for (const Value& item : iterate(operand)) {
    Value key = sort_key(item, values[1], truthy(values[0]));
    spend_steps(int64_t(seen.size()));  // compared with every kept key
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return python_equal(s, key); })) continue;
    seen.push_back(key);
    kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value min(const Value& operand, const CallArgs& args) { return extreme("min", operand, args, false); }

Value max(const Value& operand, const CallArgs& args) { return extreme("max", operand, args, true); }

Value sum(const Value& operand, const CallArgs& args) {
  auto values = bind_arguments("sum", args, {{"attribute", Value(nullptr)}, {"start", Value(0)}});
  Value total = values[1];
  for (const Value& item : iterate(operand)) {
    total = arithmetic("+", total, values[0].is_none() ? item : attribute_path(item, python_str(values[0])));
  }
  return total;
}

// map(attribute='x', default=d) looks up an attribute; map('filter', args...) applies a filter to each item.
Value map(const Value& operand, const CallArgs& args) {
  std::vector<Value> mapped;
  if (args.positional.empty()) {
    auto values = bind_arguments("map", args, {{"attribute", Value()}, {"default", Value(nullptr)}}, 1);
    for (const Value& item : iterate(operand)) {
      Value found = attribute_path(item, python_str(values[0]));
      mapped.push_back(found.is_undefined() && !values[1].is_none() ? values[1] : found);
    }
    return Value::list(std::move(mapped));
  }
  std::string filter = python_str(args.positional[0]);
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keywords};
  for (const Value& item : iterate(operand)) mapped.push_back(apply_filter(filter, item, rest));
  return Value::list(std::move(mapped));
}

Value select(const Value& operand, const CallArgs& args) { return select_or_reject(operand, args, true, false); }

Value reject(const Value& operand, const CallArgs& args) { return select_or_reject(operand, args, false, false); }

Value selectattr(const Value& operand, const CallArgs& args) { return select_or_reject(operand, args, true, true); }

Value rejectattr(const Value& operand, const CallArgs& args) { return select_or_reject(operand, args, false, true); }

}  // namespace probekit::chat::filters
