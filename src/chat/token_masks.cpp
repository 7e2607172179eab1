#include "chat/token_masks.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "common/json.h"

namespace probekit::chat {

namespace {

// The texts a message's content shows: the string, or the text of each text part.
std::vector<std::string> content_texts(const OrderedJson& message) {
  const OrderedJson& content = message.contains("content") ? message.at("content") : OrderedJson();
  if (content.is_string()) return {content.get<std::string>()};
  std::vector<std::string> texts;
  if (!content.is_array()) return texts;
  for (const OrderedJson& part : content) {
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part.at("text").is_string()) {
      texts.push_back(part.at("text").get<std::string>());
    }
  }
  return texts;
}

// The first `bytes` bytes of `text`, cut back to the start of the character there: a quote in a message.
std::string prefix_of_whole_characters(const std::string& text, size_t bytes) {
  size_t end = std::min(bytes, text.size());
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

bool overlaps(const std::pair<size_t, size_t>& token, const ContentSpan& content) {
  return token.first < content.end && content.begin < token.second;
}

}  // namespace

std::vector<ContentSpan> content_spans(const OrderedJson& messages, const std::string& rendered) {
  std::vector<ContentSpan> spans;
  size_t cursor = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string role = messages[i].value("role", "");
    for (const std::string& text : content_texts(messages[i])) {
      if (text.empty()) continue;
      const size_t found = rendered.find(text, cursor);
      if (found == std::string::npos) {
        fail_input("messages[{}] ({}): its content {} is not in the rendered conversation as written after byte {} (the "
                   "chat template rewrites it), so its tokens cannot be masked",
                   i, role, dump_json(Json(prefix_of_whole_characters(text, 60))), cursor);
      }
      spans.push_back(ContentSpan{i, role, found, found + text.size()});
      cursor = found + text.size();
    }
  }
  return spans;
}

std::vector<uint8_t> token_mask(const std::vector<std::pair<size_t, size_t>>& token_spans,
                                const std::vector<ContentSpan>& contents, TokenMask mask) {
  std::vector<uint8_t> out(token_spans.size(), mask == TokenMask::kAll ? 1 : 0);
  if (mask == TokenMask::kAll) return out;
  const std::string role = mask == TokenMask::kUser ? "user" : "assistant";
  size_t last_assistant = 0;
  for (const ContentSpan& c : contents) {
    if (c.role == "assistant") last_assistant = std::max(last_assistant, c.message);
  }
  for (const ContentSpan& content : contents) {
    if (content.role != role || (mask == TokenMask::kLastAssistant && content.message != last_assistant)) continue;
    for (size_t t = 0; t < token_spans.size(); ++t) {
      if (overlaps(token_spans[t], content)) out[t] = 1;
    }
  }
  return out;
}

}  // namespace probekit::chat
