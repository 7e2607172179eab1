#include "chat/conversation.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace probekit::chat {

namespace {

// Content the templates take: a string, a list of parts, null, or an object (Llama 3.1's template prints a tool's
// result given as one with tojson).
std::optional<MessageProblem> content_problem(const OrderedJson& content, const std::string& field) {
  if (content.is_string() || content.is_null() || content.is_object()) return std::nullopt;
  if (!content.is_array()) {
    return MessageProblem{field, fmt::format("'{}' must be a string, a list of parts, an object or null", field)};
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const OrderedJson& part = content[i];
    const std::string part_field = fmt::format("{}[{}]", field, i);
    if (!part.is_object() || !part.contains("type") || !part.at("type").is_string()) {
      return MessageProblem{part_field, fmt::format("'{}' must be an object with a string 'type'", part_field)};
    }
    const std::string type = part.at("type").get<std::string>();
    // The models and the token masks read text parts: an image, audio, file or refusal part would be left out by the
    // template or the mask, and the model scored as if it had seen it.
    if (type != "text") {
      return MessageProblem{part_field + ".type",
                            fmt::format("'{}.type' is \"{}\": the models here read text only (parts of type \"text\")",
                                        part_field, type)};
    }
    if (!(part.contains("text") && part.at("text").is_string())) {
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
      // An assistant turn that only calls tools may leave its content out (OpenAI).
      const bool only_calls = message.at("role") == "assistant" && message.contains("tool_calls") &&
                              message.at("tool_calls").is_array() && !message.at("tool_calls").empty();
      if (only_calls) continue;
      return MessageProblem{field + ".content", fmt::format("'{}.content' is missing", field)};
    }
    if (auto problem = content_problem(message.at("content"), field + ".content")) return problem;
  }
  return std::nullopt;
}

std::optional<MessageProblem> find_tools_problem(const OrderedJson& tools) {
  if (!tools.is_array()) return MessageProblem{"tools", "'tools' must be a list of functions"};
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = fmt::format("tools[{}]", i);
    const OrderedJson& tool = tools[i];
    if (!tool.is_object()) return MessageProblem{field, fmt::format("'{}' must be an object", field)};
    const bool wrapped = tool.contains("type");
    if (wrapped && tool.at("type") != "function") {
      return MessageProblem{field + ".type", fmt::format("'{}.type' must be \"function\" (the only kind of tool)", field)};
    }
    const OrderedJson* function = &tool;
    if (wrapped) {
      if (!tool.contains("function") || !tool.at("function").is_object()) {
        return MessageProblem{field + ".function", fmt::format("'{}.function' must be an object with a \"name\"", field)};
      }
      function = &tool.at("function");
    }
    const std::string name_field = field + (wrapped ? ".function.name" : ".name");
    if (!function->contains("name") || !function->at("name").is_string() || function->at("name").get<std::string>().empty()) {
      return MessageProblem{name_field, fmt::format("'{}' must be the function's name", name_field)};
    }
  }
  return std::nullopt;
}

Conversation conversation_of(const OrderedJson& json, const std::string& where) {
  const std::string prefix = where.empty() ? "" : where + ": ";
  Conversation conversation;
  conversation.messages = json.is_object() && json.contains("messages") ? json.at("messages") : json;
  if (auto problem = find_message_problem(conversation.messages)) {
    fail_input("{}{} (expected a JSON list of {{\"role\": ..., \"content\": ...}} messages, or an object with "
               "\"messages\")",
               prefix, problem->message);
  }
  if (json.is_object() && json.contains("tools") && !json.at("tools").is_null()) {
    conversation.tools = json.at("tools");
    if (auto problem = find_tools_problem(conversation.tools)) fail_input("{}{}", prefix, problem->message);
  }
  return conversation;
}

Conversation read_conversation(const std::string& path) {
  require_input_file(path);
  return conversation_of(parse_ordered_json(read_file(path), path), path);
}

std::string conversation_text(const Conversation& conversation) {
  if (conversation.tools.is_null()) return conversation.messages.dump();
  return OrderedJson{{"messages", conversation.messages}, {"tools", conversation.tools}}.dump();
}

OrderedJson user_message(const std::string& text) {
  return OrderedJson::array({OrderedJson{{"role", "user"}, {"content", text}}});
}

std::string render_conversation(const std::string& dir, const OrderedJson& messages, bool add_generation_prompt) {
  return render_conversation(dir, Conversation{messages, nullptr}, add_generation_prompt);
}

std::string render_conversation(const std::string& dir, const Conversation& conversation, bool add_generation_prompt) {
  ChatTemplateInputs inputs;
  inputs.messages = conversation.messages;
  inputs.tools = conversation.tools;
  inputs.add_generation_prompt = add_generation_prompt;
  return ChatTemplate::from_tokenizer_dir(dir).render(inputs);
}

}  // namespace probekit::chat
