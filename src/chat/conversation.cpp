#include "chat/conversation.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace probekit::chat {

namespace {

std::optional<MessageProblem> content_problem(const OrderedJson& content, const std::string& field) {
  if (content.is_string() || content.is_null()) return std::nullopt;
  if (!content.is_array()) {
    return MessageProblem{field, fmt::format("'{}' must be a string, a list of parts or null", field)};
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const OrderedJson& part = content[i];
    const std::string part_field = fmt::format("{}[{}]", field, i);
    if (!part.is_object() || !part.contains("type") || !part.at("type").is_string()) {
      return MessageProblem{part_field, fmt::format("'{}' must be an object with a string 'type'", part_field)};
    }
    if (part.at("type") == "text" && !(part.contains("text") && part.at("text").is_string())) {
      return MessageProblem{part_field + ".text", fmt::format("'{}.text' must be a string", part_field)};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<MessageProblem> find_message_problem(const OrderedJson& messages) {
  if (!messages.is_array()) return MessageProblem{"messages", "'messages' must be a list of messages"};
  if (messages.empty()) return MessageProblem{"messages", "'messages' is empty: give at least one message"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& message = messages[i];
    const std::string field = fmt::format("messages[{}]", i);
    if (!message.is_object()) return MessageProblem{field, fmt::format("'{}' must be an object with a role and a content", field)};
    if (!message.contains("role") || !message.at("role").is_string() || message.at("role").get<std::string>().empty()) {
      return MessageProblem{field + ".role", fmt::format("'{}.role' must be a role's name (system, user, assistant, ...)", field)};
    }
    if (!message.contains("content")) {
      return MessageProblem{field + ".content", fmt::format("'{}.content' is missing", field)};
    }
    if (auto problem = content_problem(message.at("content"), field + ".content")) return problem;
  }
  return std::nullopt;
}

OrderedJson read_messages(const std::string& path) {
  require_input_file(path);
  OrderedJson json;
  try {
    json = OrderedJson::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    fail_input("{}: not JSON: {}", path, e.what());
  }
  OrderedJson messages = json.is_object() && json.contains("messages") ? json.at("messages") : json;
  if (auto problem = find_message_problem(messages)) {
    fail_input("{}: {} (expected a JSON list of {{\"role\": ..., \"content\": ...}} messages, or an object with "
               "\"messages\")",
               path, problem->message);
  }
  return messages;
}

OrderedJson user_message(const std::string& text) {
  return OrderedJson::array({OrderedJson{{"role", "user"}, {"content", text}}});
}

std::string render_conversation(const std::string& dir, const OrderedJson& messages, bool add_generation_prompt) {
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.add_generation_prompt = add_generation_prompt;
  return ChatTemplate::from_tokenizer_dir(dir).render(inputs);
}

}  // namespace probekit::chat
