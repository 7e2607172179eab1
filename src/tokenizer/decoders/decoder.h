// Decoders turn token strings back into text (ByteLevel's characters to bytes, ▁ to spaces, <0xNN> to
// bytes); the tokenizer concatenates what the chain returns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_node.h"

namespace probekit::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Rewrites the list of token strings (a step may also merge them).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  /// The bytes one token stands for in the text it was encoded from: this step's decoding of the token alone,
  /// with nothing joined, stripped or repaired (a byte token is that byte, even half of a character). By default
  /// the decode_chain of that token alone.
  virtual std::string token_bytes(std::string token) const;
};

/// Runs decoders one after the other.
class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;
  std::string token_bytes(std::string token) const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

/// Builds the decoder a tokenizer.json node describes, keyed on its "type".
std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

}  // namespace probekit::tokenizer
