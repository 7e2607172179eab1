// The dynamic value a template computes with, shaped after the Python objects jinja2 works on: None, bool, int,
// float, str, list, tuple, dict (in insertion order), callables, and jinja2's Undefined. Lists and dicts are
// shared, not copied: the sandbox transformers renders in forbids changing them, except a namespace()'s
// attributes, which `set ns.x = ...` assigns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/json.h"

namespace probekit::chat {

/// JSON that keeps the order of an object's keys, as Python's dicts do: a tool's schema printed by tojson
/// lists its keys in the order they were given.
using OrderedJson = probekit::OrderedJson;

class Value;

/// What a ListData is: a list, a tuple, or one of the views a dict's keys(), values() and items() return. A
/// view iterates, has a length and answers `in` as a list does, but prints as `dict_keys([...])` and is no
/// sequence: no index or slice, no + or *, no JSON; keys and items views compare as sets, values views by
/// identity.
enum class SequenceKind { list, tuple, dict_keys, dict_values, dict_items };

/// A list, a tuple or a dict's view (Python prints them differently and == tells them apart). `depth` (1 + the
/// deepest item's) and `holds_namespace` are set when it is made: lists never change after, and a view can hold
/// a copy of its dict's items because the sandbox never changes a dict.
struct ListData {
  std::vector<Value> items;
  SequenceKind kind = SequenceKind::list;
  int depth = 1;
  bool holds_namespace = false;
};

/// What a dict-shaped object is: a plain dict, or one of jinja2's objects that only look like one.
enum class DictKind { plain, name_space, loop };

/// A dict in insertion order. Keys are found by Python equality; dicts in templates are small.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  DictKind kind = DictKind::plain;
  int depth = 1;  // 1 + the deepest value's, as set() keeps it
  bool holds_namespace = false;

  const Value* find(const Value& key) const;
  /// Sets `key`, keeping its place when it is already there. A value nested deeper than kMaxValueNesting, or a
  /// namespace (or what holds one) put into a namespace, is refused: values stay shallow and never form a cycle,
  /// so printing, comparing and freeing them cannot recurse without end.
  void set(const Value& key, Value value);
};

/// Arguments of a call: positional, then keywords in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

/// A function a template can call: a global (range, namespace), a macro, a bound method ('a'.upper).
struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

/// jinja2's Undefined: prints as nothing, is false, iterates as empty; most other uses fail with `hint`
/// ("'x' is undefined", "'dict object' has no attribute 'y'").
struct Undefined {
  std::string hint;
};

/// A template value.
class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, callable };

  Value() : data_(Undefined{}) {}
  Value(std::nullptr_t) : data_(nullptr) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(int64_t i) : data_(i) {}
  Value(double f) : data_(f) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::shared_ptr<const ListData> list) : data_(std::move(list)) {}
  Value(std::shared_ptr<DictData> dict) : data_(std::move(dict)) {}
  Value(std::shared_ptr<const Callable> callable) : data_(std::move(callable)) {}
  Value(Undefined undefined) : data_(std::move(undefined)) {}

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  /// A list, a tuple or a dict's view of `items`.
  static Value sequence(SequenceKind kind, std::vector<Value> items);
  static Value dict(DictKind kind = DictKind::plain);
  static Value function(std::string name, std::function<Value(const CallArgs&)> call);
  /// Converts JSON as Python's json.loads would: objects to dicts in key order, arrays to lists. JSON nested
  /// deeper than kMaxValueNesting is refused.
  static Value from_json(const OrderedJson& json);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  /// int, float or bool: Python's numbers.Number.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_tuple() const { return is_list() && as_list().kind == SequenceKind::tuple; }
  /// A dict's keys(), values() or items() view.
  bool is_dict_view() const {
    return is_list() && as_list().kind != SequenceKind::list && as_list().kind != SequenceKind::tuple;
  }
  /// A list or a tuple, not a view: what takes an index, a slice, + and *.
  bool is_list_or_tuple() const { return is_list() && !is_dict_view(); }
  bool is_dict() const { return kind() == Kind::dict; }
  /// A plain dict (not a namespace or a loop): jinja2's `mapping` test.
  bool is_mapping() const { return is_dict() && as_dict().kind == DictKind::plain; }
  bool is_callable() const { return kind() == Kind::callable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  /// The number as a double (bools as 0 and 1); the value must be a number.
  double to_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  DictData& as_dict() const { return *std::get<std::shared_ptr<DictData>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }
  /// True when both are the same list, dict or callable object (Python's `is`).
  bool same_object(const Value& other) const;
  /// How deep lists and dicts nest in this value: 0 for anything else.
  int depth() const;
  /// The memory this value takes as a list's or dict's item: its slot, and a string's text (copied with it).
  int64_t held_bytes() const;
  /// True for a namespace and for a list or dict holding one.
  bool holds_namespace() const;

 private:
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<DictData>, std::shared_ptr<const Callable>>
      data_;
};

}  // namespace probekit::chat
