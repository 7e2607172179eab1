#include "server/api/requests.h"

#include <fmt/format.h>

#include <limits>

#include "server/api/body_fields.h"

namespace probekit::server {

namespace {

// "messages" (one conversation, in place of the field `instead`) with the "tools" it offers, read as
// /v1/chat/completions reads them; the messages are null when the body gives none. Tools without messages are
// refused: only a chat template renders them.
chat::Conversation conversation_fields(BodyFields& fields, const std::string& instead) {
  const OrderedJson messages = fields.take_ordered("messages");
  if (messages.is_null()) {
    if (fields.take("tools") != nullptr) {
      throw RequestError(kBadRequest,
                         fmt::format("'tools' need 'messages': the chat template renders them into a conversation, "
                                     "and '{}' is scored as written", instead),
                         "tools");
    }
    return {};
  }
  chat::Conversation conversation{checked_messages(messages), tools_field(fields)};
  if (fields.take(instead) != nullptr) {
    throw RequestError(kBadRequest, fmt::format("give '{}' or 'messages' (one conversation), not both", instead),
                       "messages");
  }
  return conversation;
}

}  // namespace

RankQuery parse_rank_query(std::string_view body, const Limits& limits) {
  BodyFields fields(body);
  RankQuery query;
  query.conversation = conversation_fields(fields, "texts");
  if (!query.conversation.messages.is_null()) {
    query.view = view_fields(fields, true);
    query.steering = steering_fields(fields);
    fields.reject_unknown();
    return query;
  }
  const Json& texts = fields.required("texts");
  if (!texts.is_array()) wrong_type("texts", "a list of strings", texts);
  if (texts.empty()) throw RequestError(kBadRequest, "'texts' is empty: give at least one text", "texts");
  if (static_cast<int64_t>(texts.size()) > limits.max_texts) {
    throw RequestError(kTooLarge,
                       fmt::format("'texts' holds {} texts, more than this server's limit of {} per request (--max-texts)",
                                   texts.size(), limits.max_texts),
                       "texts");
  }
  for (size_t i = 0; i < texts.size(); ++i) query.texts.push_back(text_value(texts[i], fmt::format("texts[{}]", i)));
  query.view = view_fields(fields, true);
  query.steering = steering_fields(fields);
  fields.reject_unknown();
  return query;
}

PerTokenQuery parse_per_token_query(std::string_view body, const Limits&) {
  BodyFields fields(body);
  PerTokenQuery query;
  query.conversation = conversation_fields(fields, "text");
  if (query.conversation.messages.is_null()) query.text = text_value(fields.required("text"), "text");
  query.view = view_fields(fields, false);
  query.steering = steering_fields(fields);
  fields.reject_unknown();
  return query;
}

GenerateQuery parse_generate_query(std::string_view body, const Limits& limits) {
  BodyFields fields(body);
  GenerateQuery query;
  query.prompt = text_value(fields.required("prompt"), "prompt");
  query.max_new_tokens = fields.integer("max_new_tokens", std::min(query.max_new_tokens, limits.max_new_tokens), 1,
                                        std::numeric_limits<int64_t>::max());
  if (query.max_new_tokens > limits.max_new_tokens) {
    throw RequestError(kTooLarge,
                       fmt::format("'max_new_tokens' asks for {} tokens, more than this server's limit of {} (--max-new-tokens)",
                                   query.max_new_tokens, limits.max_new_tokens),
                       "max_new_tokens");
  }
  query.temperature = fields.number("temperature", query.temperature, 0, 100);
  query.sample_top_k = fields.integer("sample_top_k", query.sample_top_k, 0, std::numeric_limits<int32_t>::max());
  query.top_p = fields.number("top_p", query.top_p, 0, 1);
  query.seed = static_cast<uint64_t>(fields.integer("seed", 0, 0, std::numeric_limits<int64_t>::max()));
  query.stop = fields.boolean("stop", query.stop);
  query.view = view_fields(fields, false);
  query.steering = steering_fields(fields);
  query.monitors = monitor_field(fields);
  fields.reject_unknown();
  return query;
}

Json error_body(const std::string& message, const std::string& field) {
  Json body = {{"error", message}};
  if (!field.empty()) body["field"] = field;
  return body;
}

}  // namespace probekit::server
