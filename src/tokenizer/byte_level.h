// GPT-2's byte-level scheme: every byte is shown as a printable character (space as Ġ, newline as Ċ) so
// that BPE works on bytes through ordinary strings. The same mapping serves as normalizer, pre-tokenizer
// (optionally splitting with the GPT-2 regex first) and decoder, so it sits beside the pipeline rather than
// in one stage's folder.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/decoders/decoder.h"
#include "tokenizer/normalizers/normalizer.h"
#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

namespace probekit::tokenizer {

/// Appends the byte-level characters of every byte of `text`.
void append_byte_level(std::string_view text, std::string& out);

/// Maps every byte to its character.
class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

/// Adds a leading space to each piece (if asked), splits with the GPT-2 regex (if asked), maps the bytes.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  bool add_prefix_space_, use_regex_;
};

/// Maps the characters of all tokens back to bytes and decodes them as UTF-8 (U+FFFD where invalid); a
/// token with a character outside the mapping contributes its own bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
  std::string token_bytes(std::string token) const override;
};

}  // namespace probekit::tokenizer
