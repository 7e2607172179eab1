#include "readout/prompts.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "chat/conversation.h"
#include "chat/token_masks.h"
#include "common/error.h"

namespace probekit::readout {

namespace {

int64_t count_leading_specials(const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> with = tok.encode("a", true), without = tok.encode("a", false);
  auto found = std::search(with.begin(), with.end(), without.begin(), without.end());
  return found == with.end() ? 0 : found - with.begin();
}

}  // namespace

int64_t cut_from_start(std::vector<int32_t>& ids, int64_t max_length, int64_t leading, int64_t reserved) {
  auto size = static_cast<int64_t>(ids.size());
  if (max_length <= 0 || size + reserved <= max_length) return 0;
  int64_t dropped = std::min(size - leading, size + reserved - max_length);
  ids.erase(ids.begin() + leading, ids.begin() + leading + dropped);
  return dropped;
}

PromptBuilder::PromptBuilder(const tokenizer::Tokenizer& tokenizer, std::string suffix, PromptLimit limit)
    : tokenizer_(&tokenizer), suffix_(std::move(suffix)), limit_(std::move(limit)) {
  suffix_ids_ = tokenizer.encode(suffix_, false);
  leading_specials_ = count_leading_specials(tokenizer);
  auto reserved = leading_specials_ + static_cast<int64_t>(suffix_ids_.size());
  if (limit_.max_length > 0 && limit_.max_length <= reserved) {
    fail_usage("{} leaves no room for text after the {} special tokens in front and the {} tokens of the prompt suffix",
               limit_.description, leading_specials_, suffix_ids_.size());
  }
}

std::vector<Prompt> PromptBuilder::build(const std::vector<std::string>& texts) const {
  std::vector<std::string> prompts;
  prompts.reserve(texts.size());
  for (const std::string& text : texts) prompts.push_back(text + suffix_);
  std::vector<std::vector<int32_t>> ids = tokenizer_->encode_batch(prompts, true);
  std::vector<Prompt> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) fail("a prompt tokenized to no tokens (empty text and no prompt suffix?)");
    out[i].cut = cut_from_start(ids[i], limit_.max_length, leading_specials_);
    out[i].ids = std::move(ids[i]);
  }
  return out;
}

namespace {

// A conversation's template inputs from its JSON text (chat::conversation_text).
chat::ChatTemplateInputs conversation_inputs(const std::string& text) {
  const chat::Conversation conversation = chat::conversation_of(parse_ordered_json(text, "the conversation"), "");
  chat::ChatTemplateInputs inputs;
  inputs.messages = conversation.messages;
  inputs.tools = conversation.tools;
  return inputs;
}

}  // namespace

std::vector<Prompt> PromptBuilder::build_conversations(const std::vector<std::string>& conversations,
                                                       const chat::ChatTemplate& chat, TokenMask mask,
                                                       bool add_generation_prompt,
                                                       const std::function<std::string(size_t)>& where) const {
  if (!suffix_.empty()) fail_usage("conversations take no prompt suffix: the chat template writes the turns");
  std::vector<chat::ChatTemplateInputs> inputs(conversations.size());
  std::vector<std::string> rendered(conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    try {
      inputs[i] = conversation_inputs(conversations[i]);
      inputs[i].add_generation_prompt = add_generation_prompt;
      rendered[i] = chat.render(inputs[i]);
    } catch (const std::exception&) {
      rethrow_with_context(where(i));
    }
  }
  std::vector<std::vector<int32_t>> ids = tokenizer_->encode_batch(rendered, false);
  std::vector<Prompt> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    try {
      out[i].token_bytes = tokenizer_->token_spans(ids[i], rendered[i]);
      const std::vector<chat::ContentSpan> contents = chat::locate_contents(chat, inputs[i], rendered[i], mask);
      out[i].mask = chat::token_mask(out[i].token_bytes, contents, mask);
      out[i].content_begin.assign(inputs[i].messages.size(), std::string::npos);
      for (auto c = contents.rbegin(); c != contents.rend(); ++c) {
        out[i].content_begin.at(c->message) = c->as_written ? c->begin : std::string::npos;
      }
    } catch (const std::exception&) {
      rethrow_with_context(where(i));
    }
    out[i].cut = cut_from_start(ids[i], limit_.max_length, leading_specials_);
    out[i].mask.erase(out[i].mask.begin() + leading_specials_, out[i].mask.begin() + leading_specials_ + out[i].cut);
    out[i].token_bytes.erase(out[i].token_bytes.begin() + leading_specials_,
                             out[i].token_bytes.begin() + leading_specials_ + out[i].cut);
    out[i].ids = std::move(ids[i]);
    if (std::find(out[i].mask.begin(), out[i].mask.end(), 1) == out[i].mask.end()) {
      fail_input("{}: no token of this conversation is in the {} mask{}", where(i), token_mask_name(mask),
                 out[i].cut > 0 ? fmt::format(" after {} tokens were cut to fit {}", out[i].cut, limit_.description) : "");
    }
  }
  return out;
}

Prompt PromptBuilder::build_text(const std::string& text) const {
  auto reserved = static_cast<int64_t>(suffix_ids_.size());
  Prompt prompt;
  prompt.ids = tokenizer_->encode(text, true);
  if (prompt.ids.empty()) fail_input("the text tokenized to no tokens");
  prompt.cut = cut_from_start(prompt.ids, limit_.max_length, leading_specials_, reserved);
  return prompt;
}

void PromptBuilder::warn_if_cut(const std::vector<Prompt>& prompts) const {
  auto cut = std::count_if(prompts.begin(), prompts.end(), [](const Prompt& p) { return p.cut > 0; });
  if (cut > 0) {
    spdlog::warn("{} of {} texts were longer than {} and were cut from the start", cut, prompts.size(),
                 limit_.description);
  }
}

}  // namespace probekit::readout
