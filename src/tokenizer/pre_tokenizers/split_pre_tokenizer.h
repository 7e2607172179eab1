// Split: cuts pieces at the matches of a string or regex, keeping or merging the delimiters as told. Most
// byte-level tokenizers (Llama 3, Qwen) put their word regex here with behavior Isolated.
#pragma once

#include "tokenizer/pre_tokenizers/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace probekit::tokenizer {

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

/// Reads a "behavior" member (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous).
SplitBehavior read_split_behavior(const JsonNode& node);

}  // namespace probekit::tokenizer
