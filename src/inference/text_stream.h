// A generated row's text as its tokens come (Engine::generate, StreamBatch).
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace probekit::inference {

// A row's text as its tokens come. Each piece is what decoding a window of the latest tokens adds to the decode of
// the same window without the new ones, so that spaces a decoder strips at a text's start and characters split over
// several tokens come out right, and a token costs a few tokens' decode, not the whole row's. Text that a later
// token may still change waits: a piece ending inside a character (U+FFFD so far), and a run of byte tokens
// (<0xNN>), which ByteFallback decodes as a whole (one invalid byte turns the run's earlier characters into U+FFFD),
// until a token that ends the run.
// So the pieces joined are the row's decode.
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> prompt_ids)
      : tokenizer_(&tokenizer), ids_(std::move(prompt_ids)), read_(ids_.size()) {
    // A few tokens of context before the first new one, starting outside a byte run.
    prefix_ = read_ > kContext ? read_ - kContext : 0;
    while (prefix_ > 0 && in_byte_run(ids_[prefix_]) && in_byte_run(ids_[prefix_ - 1])) --prefix_;
  }

  std::string add(int32_t id, bool last) {
    ids_.push_back(id);
    if (!last && in_byte_run(id)) return {};
    return next_piece(last);
  }

  /// What a row that ended without its last token (stopped by a monitor, a callback, a deadline) still holds back.
  std::string flush() { return read_ < ids_.size() ? next_piece(true) : std::string(); }

 private:
  static constexpr size_t kContext = 5;

  std::string next_piece(bool last) {
    std::string shown = decode(prefix_, read_);
    std::string decoded = decode(prefix_, ids_.size());
    static const std::string kReplacement = "\xEF\xBF\xBD";
    bool unfinished = decoded.size() >= kReplacement.size() &&
                      decoded.compare(decoded.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
    if (unfinished && !last) return {};
    size_t common = 0;
    while (common < shown.size() && common < decoded.size() && shown[common] == decoded[common]) ++common;
    // Where a decoder did rewrite what was shown, the piece still starts at a character's first byte.
    while (common > 0 && common < decoded.size() && (static_cast<unsigned char>(decoded[common]) & 0xC0) == 0x80) --common;
    prefix_ = read_;
    read_ = ids_.size();
    return decoded.substr(common);
  }

  std::string decode(size_t begin, size_t end) const {
    return tokenizer_->decode(std::vector<int32_t>(ids_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                   ids_.begin() + static_cast<std::ptrdiff_t>(end)),
                              true);
  }

  // A byte token, or a special one, which the decode skips: the byte tokens on either side of it make one run.
  bool in_byte_run(int32_t id) const {
    if (tokenizer_->is_special(id)) return true;
    std::optional<std::string> token = tokenizer_->find_token(id);
    return token && token->size() == 6 && token->compare(0, 3, "<0x") == 0 && token->back() == '>' &&
           std::isxdigit(static_cast<unsigned char>((*token)[3])) && std::isxdigit(static_cast<unsigned char>((*token)[4]));
  }

  const tokenizer::Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;  // the window [prefix_, ids_.size()) is decoded; [prefix_, read_) was shown
};

}  // namespace probekit::inference
