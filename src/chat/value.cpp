#include "chat/value.h"

#include <cstdint>

#include "chat/operators.h"
#include "common/error.h"

namespace probekit::chat {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (python_equal(k, key)) return &v;
  }
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (python_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items) {
  return Value(std::shared_ptr<const ListData>(std::make_shared<ListData>(ListData{std::move(items), false})));
}

Value Value::tuple(std::vector<Value> items) {
  return Value(std::shared_ptr<const ListData>(std::make_shared<ListData>(ListData{std::move(items), true})));
}

Value Value::dict(DictKind kind) {
  auto data = std::make_shared<DictData>();
  data->kind = kind;
  return Value(std::move(data));
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> call) {
  return Value(std::shared_ptr<const Callable>(std::make_shared<Callable>(Callable{std::move(name), std::move(call)})));
}

Value Value::from_json(const OrderedJson& json) {
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
      for (const OrderedJson& item : json) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case OrderedJson::value_t::object: {
      Value result = dict();
      for (const auto& [key, item] : json.items()) result.as_dict().items.emplace_back(Value(key), from_json(item));
      return result;
    }
    default:  // binary and discarded values never come out of a JSON text
      return Value(nullptr);
  }
}

double Value::to_double() const {
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(as_int());
  return as_float();
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
