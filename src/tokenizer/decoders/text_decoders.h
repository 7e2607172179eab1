// Decoders that edit the token strings: Replace, ByteFallback, Fuse, Strip, WordPiece and BPEDecoder.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/decoders/decoder.h"
#include "tokenizer/regex.h"

namespace probekit::tokenizer {

/// Replaces the matches of a pattern in each token.
class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  Pattern pattern_;
  std::string content_;
};

/// Joins runs of <0xNN> tokens into the text their bytes encode; invalid UTF-8 gives one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
  std::string token_bytes(std::string token) const override;
};

/// Concatenates all tokens into one.
class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

/// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;
  /// A token as it is: what Strip removes is the pre-tokenizer's prepended space, which token_spans accounts for.
  std::string token_bytes(std::string token) const override { return token; }

 private:
  char32_t content_;
  size_t start_, stop_;
};

/// WordPiece: joins continuation pieces ("##ing") to the previous token, optionally cleans up spaces.
class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string prefix_;
  bool cleanup_;
};

/// Original BPE: the end-of-word suffix becomes a space (nothing after the last token).
class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string suffix_;
};

}  // namespace probekit::tokenizer
