#include "server/api/body_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "chat/conversation.h"

namespace probekit::server {

namespace {




// Appends `value` to `out` as JSON until `out` holds `budget` characters, going at most `depth` levels deep: a
// request may hold megabytes, and a full dump before the cut would recurse once per level.
void append_bounded(const Json& value, std::string& out, size_t budget, int depth) {
  if (out.size() >= budget) return;
  if (!value.is_structured()) {
    const size_t room = budget - out.size();
    bool long_string = value.is_string() && value.get_ref<const std::string&>().size() > room;
    out += dump_json(long_string ? Json(value.get_ref<const std::string&>().substr(0, room)) : value).substr(0, room);
    return;
  }
  if (depth == 0) {
    out += value.is_array() ? "[...]" : "{...}";
    return;
  }
  out += value.is_array() ? '[' : '{';
  bool first = true;
  for (auto it = value.begin(); it != value.end() && out.size() < budget; ++it, first = false) {
    if (!first) out += ", ";
    if (value.is_object()) out += dump_json(it.key()) + ": ";
    append_bounded(*it, out, budget, depth - 1);
  }
  out += value.is_array() ? ']' : '}';
}

// Refuses a body that nests arrays and objects deeper than kMaxJsonDepth, before it is parsed: a scan of the
// brackets outside strings, so that neither the parser nor a message about the value meets the deep nesting.
void check_nesting(std::string_view body) {
  if (const size_t at = json_nesting_past(body, kMaxJsonDepth); at != std::string_view::npos) {
    throw RequestError(kBadRequest, fmt::format("the request body nests JSON arrays and objects more than {} levels deep "
                                                "(at byte {}), this server's limit",
                                                kMaxJsonDepth, at));
  }
}

// A parser's message quotes the token it stopped at, which may be a string of megabytes.
std::string cut_message(const std::string& message) {
  constexpr size_t kLongest = 300;
  return message.size() > kLongest ? message.substr(0, kLongest - 3) + "..." : message;
}

std::vector<int64_t> layer_list(BodyFields& fields) {
  const Json* value = fields.take("layers");
  if (value == nullptr) return {};
  if (!value->is_array()) wrong_type("layers", "a list of layer numbers", *value);
  std::vector<int64_t> layers;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& layer = (*value)[i];
    std::string field = fmt::format("layers[{}]", i);
    if (!layer.is_number_integer() || (layer.is_number_unsigned() && layer.get<uint64_t>() > (1u << 30))) {
      wrong_type(field, "a layer number", layer);
    }
    layers.push_back(layer.get<int64_t>());
  }
  if (layers.empty()) throw RequestError(kBadRequest, "'layers' is empty: name at least one layer, or leave it out", "layers");
  return layers;
}

// An object's fields, each read once; whatever is left is unknown (`where` names the object in messages).
void reject_unknown_keys(const Json& object, const std::set<std::string>& known, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      throw RequestError(kBadRequest, fmt::format("unknown field '{}.{}'", where, key), where + "." + key);
    }
  }
}

std::vector<float> steering_vector(const Json& value, const std::string& field) {
  if (!value.is_array() || value.empty()) wrong_type(field, "a non-empty list of numbers", value);
  if (static_cast<int64_t>(value.size()) > kMaxSteeringVector) {
    throw RequestError(kTooLarge, fmt::format("'{}' holds {} values, more than {}", field, value.size(), kMaxSteeringVector),
                       field);
  }
  std::vector<float> vector;
  vector.reserve(value.size());
  for (const Json& x : value) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) wrong_type(field, "a list of finite numbers", x);
    vector.push_back(x.get<float>());
  }
  return vector;
}


}  // namespace

Json monitor_field(BodyFields& fields) {
  const Json* monitors = fields.take("monitors");
  if (monitors == nullptr) return Json();
  if (!monitors->is_array()) wrong_type("monitors", "a list of monitor policies", *monitors);
  return *monitors;
}

namespace {

// {"sae": NAME, "latent": i, "coefficient": c} adds c times the latent's decoder row; {"sae", "latent", "clamp": v}
// sets the latent to v (steer only).
SteerItem latent_item(const Json& item, const std::string& field) {
  reject_unknown_keys(item, {"sae", "latent", "coefficient", "clamp"}, field);
  SteerItem steer;
  if (!item["sae"].is_string()) wrong_type(field + ".sae", "an SAE's name", item["sae"]);
  steer.sae = item["sae"].get<std::string>();
  const Json* latent = item.contains("latent") ? &item["latent"] : nullptr;
  if (latent == nullptr || !latent->is_number_integer() || latent->get<int64_t>() < 0) {
    throw RequestError(kBadRequest, fmt::format("'{}.latent' must be a latent index", field), field + ".latent");
  }
  steer.latent = latent->get<int64_t>();
  steer.clamp = item.contains("clamp");
  if (steer.clamp == item.contains("coefficient")) {
    throw RequestError(kBadRequest, fmt::format("'{}' needs a 'coefficient' or a 'clamp' (one of them)", field), field);
  }
  const std::string key = steer.clamp ? "clamp" : "coefficient";
  const Json& value = item[key];
  if (!value.is_number() || !std::isfinite(value.get<double>()) || std::abs(value.get<double>()) > 1e6) {
    throw RequestError(kBadRequest, fmt::format("'{}.{}' must be a number from -1e6 to 1e6", field, key), field + "." + key);
  }
  steer.coefficient = value.get<double>();
  return steer;
}

}  // namespace

SteerItem steer_item(const Json& item, const std::string& field, bool with_coefficient) {
  if (!item.is_object()) wrong_type(field, "an object", item);
  if (with_coefficient && item.contains("sae")) return latent_item(item, field);
  reject_unknown_keys(item, with_coefficient ? std::set<std::string>{"label", "vector", "layer", "coefficient"}
                                             : std::set<std::string>{"label", "vector", "layer"},
                      field);
  SteerItem steer;
  const bool label = item.contains("label"), vector = item.contains("vector");
  if (label == vector) throw RequestError(kBadRequest, fmt::format("'{}' needs a 'label' or a 'vector' (one of them)", field), field);
  if (label) {
    if (!item["label"].is_string()) wrong_type(field + ".label", "a label's name", item["label"]);
    steer.label = item["label"].get<std::string>();
  } else {
    steer.vector = steering_vector(item["vector"], field + ".vector");
  }
  const Json* layer = item.contains("layer") ? &item["layer"] : nullptr;
  if (layer == nullptr || !layer->is_number_integer() || layer->get<int64_t>() < 0 || layer->get<int64_t>() > (1 << 20)) {
    throw RequestError(kBadRequest, fmt::format("'{}.layer' must be a layer number", field), field + ".layer");
  }
  steer.layer = layer->get<int64_t>();
  if (with_coefficient) {
    const Json* c = item.contains("coefficient") ? &item["coefficient"] : nullptr;
    if (c == nullptr || !c->is_number() || !std::isfinite(c->get<double>()) || std::abs(c->get<double>()) > 1e6) {
      throw RequestError(kBadRequest, fmt::format("'{}.coefficient' must be a number from -1e6 to 1e6", field),
                         field + ".coefficient");
    }
    steer.coefficient = c->get<double>();
  }
  return steer;
}

// A JSON value shown in a message, cut short.
std::string shown(const Json& value) {
  std::string text;
  append_bounded(value, text, kShownChars + 1, 4);
  return text.size() > kShownChars ? text.substr(0, kShownChars - 3) + "..." : text;
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& value) {
  throw RequestError(kBadRequest, fmt::format("'{}' must be {}, got {}", field, expected, shown(value)), field);
}

BodyFields::BodyFields(std::string_view body) : body_(body) {
  check_nesting(body);
  try {
    object_ = parse_json(body, "the request body");
  } catch (const std::exception& e) {
    throw RequestError(kBadRequest, cut_message(e.what()));
  }
  if (!object_.is_object()) {
    throw RequestError(kBadRequest, fmt::format("the request body must be a JSON object, got {}", shown(object_)));
  }
}

BodyFields::BodyFields(const Json& object, const std::string& field) : object_(object) {
  if (!object_.is_object()) wrong_type(field, "an object", object_);
}

// The field's value, or nullptr when it is absent or null.
const Json* BodyFields::take(const std::string& key) {
  taken_.insert(key);
  auto found = object_.find(key);
  return found == object_.end() || found->is_null() ? nullptr : &*found;
}

OrderedJson BodyFields::take_ordered(const std::string& key) {
  if (take(key) == nullptr) return nullptr;
  if (body_.empty()) throw std::logic_error("take_ordered reads a whole body's fields");
  if (!ordered_) {
    try {
      ordered_ = parse_ordered_json(body_, "the request body", {"messages", "tools"});
    } catch (const std::invalid_argument& e) {  // an integer past 64 bits, which the sorted reading took as a double
      throw RequestError(kBadRequest, cut_message(e.what()), key);
    }
  }
  return ordered_->at(key);
}

const Json& BodyFields::required(const std::string& key) {
  const Json* value = take(key);
  if (value == nullptr) throw RequestError(kBadRequest, fmt::format("'{}' is missing", key), key);
  return *value;
}

int64_t BodyFields::integer(const std::string& key, int64_t fallback, int64_t low, int64_t high) {
  const Json* value = take(key);
  if (value == nullptr) return fallback;
  // A whole number past 64 bits is read as a float: it is out of range, not of the wrong type.
  const bool huge = value->is_number_float() && std::fabs(value->get<double>()) >= 0x1p63 &&
                    std::isfinite(value->get<double>()) && std::nearbyint(value->get<double>()) == value->get<double>();
  if (!value->is_number_integer() && !huge) wrong_type(key, "an integer", *value);
  // A JSON parser reads every non-negative integer as unsigned, which may exceed int64_t.
  const bool in_range = !huge && (value->is_number_unsigned()
                                      ? value->get<uint64_t>() <= static_cast<uint64_t>(high) &&
                                            (low <= 0 || value->get<uint64_t>() >= static_cast<uint64_t>(low))
                                      : value->get<int64_t>() >= low && value->get<int64_t>() <= high);
  if (!in_range) {
    throw RequestError(kBadRequest, fmt::format("'{}' must be from {} to {}, got {}", key, low, high, shown(*value)), key);
  }
  return value->get<int64_t>();
}

double BodyFields::number(const std::string& key, double fallback, double low, double high) {
  const Json* value = take(key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) wrong_type(key, "a number", *value);
  double x = value->get<double>();
  if (!std::isfinite(x) || x < low || x > high) {
    throw RequestError(kBadRequest, fmt::format("'{}' must be a number from {} to {}, got {}", key, low, high, shown(*value)), key);
  }
  return x;
}

bool BodyFields::boolean(const std::string& key, bool fallback) {
  const Json* value = take(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) wrong_type(key, "true or false", *value);
  return value->get<bool>();
}

std::string BodyFields::choice(const std::string& key, const std::string& fallback, const std::set<std::string>& allowed) {
  const Json* value = take(key);
  if (value == nullptr) return fallback;
  if (!value->is_string() || allowed.count(value->get<std::string>()) == 0) {
    std::string names;
    for (const std::string& name : allowed) names += (names.empty() ? "" : ", ") + name;
    throw RequestError(kBadRequest, fmt::format("'{}' must be one of {}, got {}", key, names, shown(*value)), key);
  }
  return value->get<std::string>();
}

// Throws naming the first field no reader took.
void BodyFields::reject_unknown() const {
  for (const auto& [key, value] : object_.items()) {
    if (taken_.count(key) == 0) {
      std::string known;
      for (const std::string& name : taken_) known += (known.empty() ? "" : ", ") + name;
      // A key may be as long as the body: named cut short.
      std::string name = key.size() > kShownChars ? key.substr(0, kShownChars - 3) + "..." : key;
      throw RequestError(kBadRequest, fmt::format("unknown field '{}' (this request takes {})", name, known), name);
    }
  }
}


OrderedJson checked_messages(const OrderedJson& messages) {
  if (auto problem = chat::find_message_problem(messages)) {
    throw RequestError(kBadRequest, problem->message, problem->field);
  }
  return messages;
}

OrderedJson tools_field(BodyFields& fields) {
  OrderedJson tools = fields.take_ordered("tools");
  if (tools.is_null()) return tools;
  if (auto problem = chat::find_tools_problem(tools)) throw RequestError(kBadRequest, problem->message, problem->field);
  return tools;
}

// A text to score: a non-empty string, at most --max-body-bytes long anyway (the body holds it).
std::string text_value(const Json& value, const std::string& field) {
  if (!value.is_string()) wrong_type(field, "a string", value);
  std::string text = value.get<std::string>();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw RequestError(kBadRequest, fmt::format("'{}' is empty: give the text to analyze", field), field);
  }
  return text;
}

ViewQuery view_fields(BodyFields& fields, bool with_modes) {
  ViewQuery view;
  view.top_k = fields.integer("top_k", view.top_k, 1, std::numeric_limits<int32_t>::max());
  view.threshold = fields.number("threshold", view.threshold, 0, 1);
  view.calibrated = fields.boolean("calibrated", view.calibrated);
  view.layers = layer_list(fields);
  if (with_modes) {
    view.mode = fields.choice("mode", view.mode, {"all", "by-action", "by-layer"});
    view.aggregate = fields.choice("aggregate", view.aggregate, {"max", "mean"});
  }
  return view;
}

SteeringQuery steering_fields(BodyFields& fields) {
  SteeringQuery query;
  for (const char* key : {"steer", "ablate"}) {
    const Json* list = fields.take(key);
    if (list == nullptr) continue;
    if (!list->is_array()) wrong_type(key, "a list of steering items", *list);
    std::vector<SteerItem>& items = std::string(key) == "steer" ? query.steer : query.ablate;
    for (size_t i = 0; i < list->size(); ++i) {
      if (static_cast<int64_t>(query.steer.size() + query.ablate.size()) >= kMaxSteeringItems) {
        throw RequestError(kTooLarge, fmt::format("'steer' and 'ablate' hold more than {} items", kMaxSteeringItems), key);
      }
      items.push_back(steer_item((*list)[i], fmt::format("{}[{}]", key, i), std::string(key) == "steer"));
    }
  }
  return query;
}

}  // namespace probekit::server
