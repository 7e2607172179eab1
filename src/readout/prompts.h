// Turning a text into the token ids a probe sees: text + prompt suffix, with the tokenizer's special tokens,
// and long prompts cut from the start of the text so the special tokens in front and the end survive.
// Capture and inference build prompts here only, so probes are always scored on prompts made the way they
// were trained.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "sites/positions.h"
#include "tokenizer/tokenizer.h"

namespace probekit::readout {

/// The longest prompt, and what to call that limit in messages ("--max-length 128 tokens").
struct PromptLimit {
  int64_t max_length = 0;  // tokens; 0: no limit
  std::string description;
};

/// One prompt's token ids and how many tokens of its text the cut removed.
struct Prompt {
  std::vector<int32_t> ids;
  int64_t cut = 0;
  std::vector<uint8_t> mask;  // a conversation's: 1 for each token read (--mask); empty for a text (every token)
  std::vector<std::pair<size_t, size_t>> token_bytes;  // a conversation's: each token's byte span in its rendering
  std::vector<size_t> content_begin;  // a conversation's: where each message's content starts there (npos: none)
};

class PromptBuilder {
 public:
  /// A limit that leaves no room for text after the special tokens in front is a usage error.
  PromptBuilder(const tokenizer::Tokenizer& tokenizer, std::string suffix, PromptLimit limit);

  /// The prompt of each text (text + suffix with special tokens, cut to the limit), tokenized in parallel.
  std::vector<Prompt> build(const std::vector<std::string>& texts) const;
  /// Conversations' prompts, each a JSON list of messages: rendered with `chat`'s template as transformers'
  /// apply_chat_template renders it (with the generation prompt when `add_generation_prompt`), tokenized without
  /// adding special tokens (the template writes its own), cut to the limit as texts are, and masked: mask[t] = 1
  /// for the tokens `mask` reads. A content the template rewrites, or a conversation none of whose tokens is in the
  /// mask, is an error naming `where(i)`. The builder's suffix must be empty.
  std::vector<Prompt> build_conversations(const std::vector<std::string>& conversations, const chat::ChatTemplate& chat,
                                          TokenMask mask, bool add_generation_prompt,
                                          const std::function<std::string(size_t)>& where) const;
  /// For reading every prefix of a text: the text's ids (with special tokens) cut so that any prefix of them
  /// followed by suffix_ids() fits the limit.
  Prompt build_text(const std::string& text) const;
  /// The suffix on its own, without special tokens.
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }
  /// How many tokens the tokenizer puts in front of every text (BOS): 0 or 1 for the supported families.
  int64_t leading_specials() const { return leading_specials_; }
  const PromptLimit& limit() const { return limit_; }
  /// Logs the one warning for prompts that were cut, when any was.
  void warn_if_cut(const std::vector<Prompt>& prompts) const;

 private:
  const tokenizer::Tokenizer* tokenizer_;
  std::string suffix_;
  PromptLimit limit_;
  std::vector<int32_t> suffix_ids_;
  int64_t leading_specials_ = 0;
};

/// Cuts `ids` so that they and `reserved` more tokens fit `max_length` (0: no limit) by dropping tokens right
/// after the `leading` special ones; returns how many it dropped.
int64_t cut_from_start(std::vector<int32_t>& ids, int64_t max_length, int64_t leading, int64_t reserved = 0);

}  // namespace probekit::readout
