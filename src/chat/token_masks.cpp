#include "chat/token_masks.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "chat/unicode_text.h"
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

// Calls `visit` on each non-empty text of a message's content (the string, or each text part's text), in order, as
// content_texts lists them.
template <typename Visit>
void for_each_text(OrderedJson& message, Visit&& visit) {
  if (!message.contains("content")) return;
  OrderedJson& content = message.at("content");
  auto text_of = [&](OrderedJson& value) {
    std::string text = value.get<std::string>();
    if (text.empty()) return;
    visit(text);
    value = text;
  };
  if (content.is_string()) return text_of(content);
  if (!content.is_array()) return;
  for (OrderedJson& part : content) {
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part.at("text").is_string()) {
      text_of(part.at("text"));
    }
  }
}

// Places `span` at `text`, a content no mask reads, after `cursor`: searched without the whitespace around it (its first
// match is never later than the text's as written, which may occur again further on, inside a message that is read),
// widened to the text as written where that is there; at npos where it is nowhere.
void place_unread(const std::string& text, const std::string& rendered, size_t cursor, ContentSpan& span) {
  const std::string core = python_strip(text, std::nullopt, true, true);  // as the templates' trim leaves it
  const size_t found = core.empty() ? std::string::npos : rendered.find(core, cursor);
  span.begin = span.end = std::string::npos;
  if (found == std::string::npos) return;
  const size_t lead = text.find(core);
  span.as_written = found >= cursor + lead && rendered.compare(found - lead, text.size(), text) == 0;
  span.begin = span.as_written ? found - lead : found;
  span.end = span.begin + (span.as_written ? text.size() : core.size());
}

bool overlaps(const std::pair<size_t, size_t>& token, const ContentSpan& content) {
  return token.first < content.end && content.begin < token.second;
}

}  // namespace

std::vector<ContentSpan> content_spans(const OrderedJson& messages, const std::string& rendered,
                                       const std::optional<TokenMask>& mask) {
  size_t last_assistant = std::string::npos;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].value("role", "") == "assistant") last_assistant = i;
  }
  auto read = [&](size_t i, const std::string& role) {
    if (!mask) return true;
    switch (*mask) {
      case TokenMask::kUser: return role == "user";
      case TokenMask::kAssistant: return role == "assistant";
      case TokenMask::kLastAssistant: return i == last_assistant;
      default: return true;  // kAll: every token, each message's
    }
  };
  std::vector<ContentSpan> spans;
  size_t cursor = 0, text_index = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string role = messages[i].value("role", "");
    const size_t before = spans.size();
    for (const std::string& text : content_texts(messages[i])) {
      if (text.empty()) continue;
      const size_t index = text_index++;
      const bool needed = read(i, role);
      ContentSpan span{i, role, rendered.find(text, cursor), std::string::npos, index};
      span.end = span.begin == std::string::npos ? span.begin : span.begin + text.size();
      if (!needed) place_unread(text, rendered, cursor, span);
      if (span.begin == std::string::npos) {
        if (!needed) continue;
        fail_input("messages[{}] ({}): its content {} is not in the rendered conversation as written after byte {} (the "
                   "chat template rewrites it), so its tokens cannot be masked",
                   i, role, dump_json(Json(prefix_of_whole_characters(text, 60))), cursor);
      }
      spans.push_back(span);
      cursor = span.end;
    }
    if (spans.size() == before) spans.push_back(ContentSpan{i, role, std::string::npos, std::string::npos});
  }
  return spans;
}

std::vector<ContentSpan> locate_contents(const ChatTemplate& chat, const ChatTemplateInputs& inputs,
                                         const std::string& rendered, const std::optional<TokenMask>& mask) {
  std::vector<ContentSpan> spans = content_spans(inputs.messages, rendered, mask);
  ChatTemplateInputs marked = inputs;
  std::vector<std::string> markers;
  for (OrderedJson& message : marked.messages) {
    for_each_text(message, [&](std::string& text) {
      markers.push_back(fmt::format("\u27e6probekit-content-{}\u27e7", markers.size()));
      text = markers.back();
    });
  }
  std::string template_text;
  try {
    template_text = chat.render(marked);
  } catch (const std::exception&) {
    return spans;  // a template that refuses the markers: the search's spans
  }
  // The template's text between the markers, with the contents put back, must be `rendered` itself.
  std::string rebuilt;
  std::vector<std::pair<size_t, size_t>> placed;
  size_t cursor = 0;
  for (ContentSpan& span : spans) {
    if (span.begin == std::string::npos) continue;
    const size_t at = template_text.find(markers.at(span.text), cursor);
    if (at == std::string::npos) return spans;
    rebuilt += template_text.substr(cursor, at - cursor);
    placed.emplace_back(rebuilt.size(), rebuilt.size() + (span.end - span.begin));
    rebuilt += rendered.substr(span.begin, span.end - span.begin);
    cursor = at + markers[span.text].size();
  }
  rebuilt += template_text.substr(cursor);
  if (rebuilt != rendered) return spans;
  size_t k = 0;
  for (ContentSpan& span : spans) {
    if (span.begin != std::string::npos) std::tie(span.begin, span.end) = placed[k++];
  }
  return spans;
}

std::vector<uint8_t> token_mask(const std::vector<std::pair<size_t, size_t>>& token_spans,
                                const std::vector<ContentSpan>& contents, TokenMask mask) {
  std::vector<uint8_t> out(token_spans.size(), mask == TokenMask::kAll ? 1 : 0);
  if (mask == TokenMask::kAll) return out;
  const std::string role = mask == TokenMask::kUser ? "user" : "assistant";
  size_t last_assistant = 0;  // every message has a span, an empty one where it has no text
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
