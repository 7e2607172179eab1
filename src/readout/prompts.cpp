#include "readout/prompts.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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
