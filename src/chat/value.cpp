#include "chat/value.h"

#include <algorithm>
#include <cstdint>

#include "chat/operators.h"
#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "common/error.h"

namespace probekit::chat {

const Value* DictData::find(const Value& key) const {
  spend_steps(int64_t(items.size()));  // keys are searched in order: a large dict is as much work as its size
  for (const auto& [k, v] : items) {
    if (python_equal(k, key)) return &v;
  }
  return nullptr;
}

namespace {

[[noreturn]] void fail_too_deep() {
  fail_render("a value nests lists and dicts deeper than {} levels", kMaxValueNesting);
}

Value make_sequence(SequenceKind kind, std::vector<Value> items) {
  auto data = std::make_shared<ListData>(ListData{std::move(items), kind});
  int64_t bytes = 0;
  for (const Value& item : data->items) {
    bytes += item.held_bytes();
    data->depth = std::max(data->depth, item.depth() + 1);
    data->holds_namespace = data->holds_namespace || item.holds_namespace();
  }
  if (data->depth > kMaxValueNesting) fail_too_deep();
  spend_bytes(bytes);
  return Value(std::shared_ptr<const ListData>(std::move(data)));
}

Value from_json_at(const OrderedJson& json, int depth);

}  // namespace

void DictData::set(const Value& key, Value value) {
  if (kind == DictKind::name_space && value.holds_namespace()) {
    fail_render("a namespace cannot hold a namespace, or a list or dict holding one");
  }
  if (value.depth() + 1 > kMaxValueNesting) fail_too_deep();
  depth = std::max(depth, value.depth() + 1);
  holds_namespace = holds_namespace || value.holds_namespace();
  spend_steps(int64_t(items.size()));  // the key is searched in order
  for (auto& [k, v] : items) {
    if (python_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  if (kind != DictKind::loop) spend_bytes(key.held_bytes() + value.held_bytes());  // a loop's lives one iteration
  items.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items) { return make_sequence(SequenceKind::list, std::move(items)); }

Value Value::tuple(std::vector<Value> items) { return make_sequence(SequenceKind::tuple, std::move(items)); }

Value Value::sequence(SequenceKind kind, std::vector<Value> items) { return make_sequence(kind, std::move(items)); }

Value Value::dict(DictKind kind) {
  auto data = std::make_shared<DictData>();
  data->kind = kind;
  return Value(std::move(data));
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> call) {
  return Value(std::shared_ptr<const Callable>(std::make_shared<Callable>(Callable{std::move(name), std::move(call)})));
}

Value Value::from_json(const OrderedJson& json) { return from_json_at(json, 0); }

namespace {

Value from_json_at(const OrderedJson& json, int depth) {
  if (depth >= kMaxValueNesting && (json.is_array() || json.is_object())) {
    fail_input("chat template input nests lists and objects deeper than {} levels", kMaxValueNesting);
  }
  switch (json.type()) {
    case OrderedJson::value_t::null:
      return Value(nullptr);
    case OrderedJson::value_t::boolean:
      return Value(json.get<bool>());
    case OrderedJson::value_t::number_integer:
      return Value(json.get<int64_t>());
    case OrderedJson::value_t::number_unsigned:
      if (json.get<uint64_t>() > uint64_t(INT64_MAX)) fail_input("chat template input {} does not fit in 64 bits", json.dump());
      return Value(json.get<int64_t>());
    case OrderedJson::value_t::number_float:
      return Value(json.get<double>());
    case OrderedJson::value_t::string:
      return Value(json.get<std::string>());
    case OrderedJson::value_t::array: {
      std::vector<Value> items;
      for (const OrderedJson& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case OrderedJson::value_t::object: {
      Value result = Value::dict();
      DictData& dict = result.as_dict();
      for (const auto& [key, item] : json.items()) {  // a JSON object's keys are distinct: no search as set() does
        Value value = from_json_at(item, depth + 1);
        dict.depth = std::max(dict.depth, value.depth() + 1);
        dict.items.emplace_back(Value(key), std::move(value));
      }
      return result;
    }
    default:  // binary and discarded values never come out of a JSON text
      return Value(nullptr);
  }
}

}  // namespace

double Value::to_double() const {
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(as_int());
  return as_float();
}

int64_t Value::held_bytes() const {
  return int64_t(sizeof(Value)) + (is_string() ? int64_t(as_string().size()) : 0);
}

int Value::depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

bool Value::holds_namespace() const {
  if (is_list()) return as_list().holds_namespace;
  return is_dict() && (as_dict().kind == DictKind::name_space || as_dict().holds_namespace);
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::list:
      return &as_list() == &other.as_list();
    case Kind::dict:
      return &as_dict() == &other.as_dict();
    case Kind::callable:
      return &as_callable() == &other.as_callable();
    default:
      return false;
  }
}

}  // namespace probekit::chat
