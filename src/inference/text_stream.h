// A generated row's text as its tokens come (Engine::generate, StreamBatch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace probekit::inference {

// A row's text as its tokens come: each token's piece is what decoding the whole row adds to what was shown,
// so that spaces and characters split over several tokens come out right; a piece that ends inside a
// character (U+FFFD so far) waits for the next token.
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> prompt_ids)
      : tokenizer_(&tokenizer), ids_(std::move(prompt_ids)), shown_(tokenizer.decode(ids_, true)) {}

  std::string add(int32_t id, bool last) {
    ids_.push_back(id);
    std::string decoded = tokenizer_->decode(ids_, true);
    static const std::string kReplacement = "\xEF\xBF\xBD";
    bool unfinished = decoded.size() >= kReplacement.size() &&
                      decoded.compare(decoded.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
    if (unfinished && !last) return {};
    size_t common = 0;
    while (common < shown_.size() && common < decoded.size() && shown_[common] == decoded[common]) ++common;
    std::string piece = decoded.substr(common);
    shown_ = std::move(decoded);
    return piece;
  }

 private:
  const tokenizer::Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  std::string shown_;
};

}  // namespace probekit::inference
