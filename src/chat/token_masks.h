// Which tokens of a rendered conversation belong to which message: each message's content found in the rendered text
// in order, and the tokens whose byte spans overlap the contents of a role (--mask). Role headers, turn markers and
// the template's own text are in no message's content, so in no role's mask.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "sites/positions.h"

namespace probekit::chat {

/// Where one text part of a message's content lies in the rendered conversation, in bytes [begin, end).
struct ContentSpan {
  size_t message = 0;
  std::string role;
  size_t begin = 0, end = 0;
  size_t text = std::string::npos;  // which of the conversation's non-empty texts, in order (npos: none)
  bool as_written = true;  // false: found without the whitespace around it (where spans' offsets cannot be placed)
};

/// The spans of every message's content (a string, or each text part of a list) in `rendered`, found in order, each
/// search starting where the previous one ended; a message without text has an empty span at npos (no token is in
/// it). A content the template rewrites (so that it is not in the text as written) is an error naming the message
/// (std::invalid_argument) where `mask` reads it (none given, or kAll: every message). One it does not read is looked
/// for without the whitespace around it (Gemma's and Llama's templates trim each content), else left at npos: a user's
/// trailing newline does not keep the assistant's tokens from being masked.
std::vector<ContentSpan> content_spans(const OrderedJson& messages, const std::string& rendered,
                                       const std::optional<TokenMask>& mask = std::nullopt);

/// content_spans of `rendered` (`inputs` rendered by `chat`), each content placed where the template printed it: the
/// conversation is rendered again with a marker in place of each content, so that a content that also occurs in the
/// template's own text before it (a reply "d" in "<end_of_turn>") is not taken for it. A template whose text depends
/// on the contents (Qwen 3's looks for "</think>" in them) does not give `rendered` back around the markers: its
/// contents are searched for as content_spans does.
std::vector<ContentSpan> locate_contents(const ChatTemplate& chat, const ChatTemplateInputs& inputs,
                                         const std::string& rendered, const std::optional<TokenMask>& mask = std::nullopt);

/// 1 for each token (its byte span in the rendered text, Tokenizer::token_spans) that `mask` reads: one overlapping
/// a content of the role (kLastAssistant: of the last assistant message, none when it has no text), or every token
/// (kAll).
std::vector<uint8_t> token_mask(const std::vector<std::pair<size_t, size_t>>& token_spans,
                                const std::vector<ContentSpan>& contents, TokenMask mask);

}  // namespace probekit::chat
