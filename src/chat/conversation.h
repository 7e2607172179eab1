// A conversation as the tools and the server take it: a JSON list of messages ({"role", "content", ...}), checked
// before a template sees it, and rendered into the prompt a model answers with the checkpoint's chat template.
#pragma once

#include <optional>
#include <string>

#include "chat/chat_template.h"

namespace probekit::chat {

/// What is wrong with a list of messages: the field ("messages[2].role") and a message naming it.
struct MessageProblem {
  std::string field;
  std::string message;
};

/// The first problem of `messages`, or nothing when it is a non-empty list of objects, each with a string "role"
/// and a "content" that is a string, a list of parts ({"type": "text", "text": ...}, ...), an object (a tool's
/// result) or null; an assistant's turn that only calls tools ("tool_calls") may leave it out. Other keys (name,
/// tool_calls, reasoning_content) are the template's to read.
std::optional<MessageProblem> find_message_problem(const OrderedJson& messages);

/// The first problem of `tools` (an OpenAI request's "tools"), or nothing when it is a list of functions as
/// transformers' apply_chat_template takes them: {"type": "function", "function": {"name", ...}} or a bare
/// {"name", ...} schema. Their descriptions and parameters are the template's to print.
std::optional<MessageProblem> find_tools_problem(const OrderedJson& tools);

/// A conversation as a file gives it: its messages and the tools offered (null: none).
struct Conversation {
  OrderedJson messages;
  OrderedJson tools;
};

/// The conversation `json` holds: a list of messages, or an object with a "messages" list and optionally "tools" (an
/// OpenAI request body). A problem is an error naming `where` (when not empty) and the field.
Conversation conversation_of(const OrderedJson& json, const std::string& where);

/// The conversation of a file, as conversation_of reads it.
Conversation read_conversation(const std::string& path);

/// A conversation as one JSON text, the form in which dataset rows, --file rows, --messages and requests reach
/// scoring: its messages alone, or {"messages", "tools"} where it offers tools. Objects keep the order of their keys,
/// as written: a template's tojson prints a tool's schema and a call's arguments in that order, as transformers'
/// json.dumps does.
std::string conversation_text(const Conversation& conversation);

/// One user message holding `text`.
OrderedJson user_message(const std::string& text);

/// The prompt of `messages` for the model whose tokenizer files are in `dir` (chat_template.jinja, or
/// tokenizer_config.json's chat_template): rendered as transformers' apply_chat_template renders it, with the
/// generation prompt unless `add_generation_prompt` is false. The text holds the template's special tokens (BOS
/// included): tokenize it without adding them again.
std::string render_conversation(const std::string& dir, const OrderedJson& messages, bool add_generation_prompt = true);

/// The same, offering `tools` (null: none) to the template as transformers' apply_chat_template(tools=...) does.
std::string render_conversation(const std::string& dir, const Conversation& conversation, bool add_generation_prompt = true);

}  // namespace probekit::chat
