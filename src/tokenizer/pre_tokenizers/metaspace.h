// Metaspace (SentencePiece style): spaces become ▁, a ▁ is put in front of the text, and the text is cut
// before each ▁. The decoder turns ▁ back into spaces.
#pragma once

#include <string>

#include "tokenizer/decoders/decoder.h"
#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

namespace probekit::tokenizer {

/// When the ▁ goes in front: of every piece, only of the piece that starts the input, or never.
enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split);
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, PrependScheme scheme) : replacement_(replacement), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override;
  /// Every replacement character a space: what the token stood for, the prepended one included.
  std::string token_bytes(std::string token) const override;

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

/// Reads "replacement", "prepend_scheme" and the legacy "add_prefix_space" of a Metaspace node.
void read_metaspace(const JsonNode& node, char32_t& replacement, PrependScheme& scheme);

}  // namespace probekit::tokenizer
