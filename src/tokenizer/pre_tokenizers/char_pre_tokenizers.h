// Pre-tokenizers that cut at characters of a class: Whitespace, WhitespaceSplit, Punctuation, Digits,
// CharDelimiterSplit and BertPreTokenizer.
#pragma once

#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

namespace probekit::tokenizer {

/// Keeps runs of word characters and runs of other non-space characters (`\w+|[^\w\s]+`).
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override;
};

/// The classes a CharClassPreTokenizer cuts at.
enum class CharClass { kWhitespace, kPunctuation, kNumeric, kDelimiter };

/// Cuts at each character of a class, treating the characters as `behavior` says.
class CharClassPreTokenizer : public PreTokenizer {
 public:
  CharClassPreTokenizer(CharClass cls, SplitBehavior behavior, char32_t delimiter = 0)
      : class_(cls), behavior_(behavior), delimiter_(delimiter) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  bool matches(char32_t cp) const;

  CharClass class_;
  SplitBehavior behavior_;
  char32_t delimiter_;
};

/// BERT's: removes whitespace, then isolates punctuation.
class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  CharClassPreTokenizer whitespace_{CharClass::kWhitespace, SplitBehavior::kRemoved};
  CharClassPreTokenizer punctuation_{CharClass::kPunctuation, SplitBehavior::kIsolated};
};

}  // namespace probekit::tokenizer
