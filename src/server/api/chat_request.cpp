#include "server/api/chat_request.h"

#include <fmt/format.h>

#include <limits>

#include "server/api/body_fields.h"

namespace probekit::server {

namespace {

// "stop": a string or a list of at most kMaxStopStrings non-empty strings.
std::vector<std::string> stop_strings(BodyFields& fields) {
  const Json* value = fields.take("stop");
  if (value == nullptr) return {};
  Json list = value->is_string() ? Json::array({*value}) : *value;
  if (!list.is_array() || static_cast<int64_t>(list.size()) > kMaxStopStrings) {
    wrong_type("stop", "a string or a list of up to 4 strings", *value);
  }
  std::vector<std::string> stop;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string() || list[i].get_ref<const std::string&>().empty()) {
      wrong_type(fmt::format("stop[{}]", i), "a non-empty string", list[i]);
    }
    stop.push_back(list[i].get<std::string>());
  }
  return stop;
}

// "max_completion_tokens" (OpenAI's current name) or "max_tokens" (its older one), bounded by --max-new-tokens.
int64_t reply_tokens(BodyFields& fields, const Limits& limits) {
  const int64_t most = std::numeric_limits<int64_t>::max();
  const int64_t older = fields.integer("max_tokens", 0, 1, most);
  const int64_t newer = fields.integer("max_completion_tokens", 0, 1, most);
  if (older > 0 && newer > 0 && older != newer) {
    throw RequestError(kBadRequest, fmt::format("'max_tokens' ({}) and 'max_completion_tokens' ({}) differ: send one "
                                                "('max_tokens' is its older name)", older, newer),
                       "max_tokens");
  }
  const int64_t asked = newer > 0 ? newer : older;
  if (asked > limits.max_new_tokens) {
    const char* field = newer > 0 ? "max_completion_tokens" : "max_tokens";
    throw RequestError(kTooLarge,
                       fmt::format("'{}' asks for {} tokens, more than this server's limit of {} (--max-new-tokens)", field,
                                   asked, limits.max_new_tokens),
                       field);
  }
  return asked > 0 ? asked : limits.max_new_tokens;
}

// "probes": how the scores on each token are shown, with the field names of /v1/generate under "probes.".
ViewQuery probe_view(BodyFields& fields) {
  const Json* value = fields.take("probes");
  if (value == nullptr) return {};
  try {
    BodyFields view_object(*value, "probes");
    ViewQuery view = view_fields(view_object, false);
    view_object.reject_unknown();
    return view;
  } catch (const RequestError& e) {
    if (e.field() == "probes") throw;
    std::string message = e.what();
    const std::string quoted = "'" + e.field();
    if (message.rfind(quoted, 0) == 0) message = "'probes." + message.substr(1);
    throw RequestError(e.status(), message, "probes." + e.field());
  }
}

// "tools": functions the template offers the model, as transformers' apply_chat_template(tools=...) renders them.
// The reply's tool calls come back as the text the model writes: "tool_choice" can only leave the choice to it.
OrderedJson offered_tools(BodyFields& fields) {
  OrderedJson tools = tools_field(fields);
  if (const Json* choice = fields.take("tool_choice"); choice != nullptr && *choice != "auto") {
    throw RequestError(kBadRequest, "'tool_choice' can only be \"auto\" here: the template offers the tools and the model "
                                    "chooses (its calls come back as the text it writes)", "tool_choice");
  }
  return tools;
}

// Fields OpenAI's clients may send that change nothing here at their defaults; other values are refused.
void check_defaults(BodyFields& fields) {
  if (fields.integer("n", 1, 1, std::numeric_limits<int64_t>::max()) != 1) {
    throw RequestError(kBadRequest, "'n' must be 1: this server gives one choice per request", "n");
  }
  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    if (fields.number(penalty, 0, -2, 2) != 0) {
      throw RequestError(kBadRequest, fmt::format("'{}' is not supported: leave it out or at 0", penalty), penalty);
    }
  }
  if (fields.boolean("logprobs", false)) {
    throw RequestError(kBadRequest, "'logprobs' is not supported (the probe scores come in 'probes')", "logprobs");
  }
  const Json* user = fields.take("user");
  if (user != nullptr && !user->is_string()) wrong_type("user", "a string", *user);
}

}  // namespace

ChatQuery parse_chat_query(std::string_view body, const Limits& limits) {
  BodyFields fields(body);
  ChatQuery query;
  const Json* model = fields.take("model");
  if (model != nullptr && !model->is_string()) wrong_type("model", "a model's name", *model);
  if (model != nullptr) query.model = model->get<std::string>();
  fields.required("messages");
  query.messages = checked_messages(fields.take_ordered("messages"));
  query.tools = offered_tools(fields);
  query.max_tokens = reply_tokens(fields, limits);
  query.temperature = fields.number("temperature", query.temperature, 0, 2);
  query.top_p = fields.number("top_p", query.top_p, 0, 1);
  if (fields.take("seed") != nullptr) {
    query.seed = static_cast<uint64_t>(fields.integer("seed", 0, std::numeric_limits<int64_t>::min(),
                                                      std::numeric_limits<int64_t>::max()));
  }
  query.stop = stop_strings(fields);
  query.stream = fields.boolean("stream", false);
  if (const Json* options = fields.take("stream_options")) {
    BodyFields stream_options(*options, "stream_options");
    query.include_usage = stream_options.boolean("include_usage", false);
    stream_options.reject_unknown();
    if (!query.stream) throw RequestError(kBadRequest, "'stream_options' goes with \"stream\": true", "stream_options");
  }
  check_defaults(fields);
  query.probes = probe_view(fields);
  query.steering = steering_fields(fields);
  query.monitors = monitor_field(fields);
  fields.reject_unknown();
  return query;
}

Json openai_error_body(int status, const std::string& message, const std::string& field) {
  const char* type = status == 401 ? "authentication_error" : status < 500 ? "invalid_request_error" : "server_error";
  return {{"error", {{"message", message}, {"type", type}, {"param", field.empty() ? Json() : Json(field)},
                     {"code", status == 404 ? Json("not_found") : status == 429 ? Json("rate_limit_exceeded") : Json()}}}};
}

}  // namespace probekit::server
