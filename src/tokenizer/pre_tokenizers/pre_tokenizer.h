// Pre-tokenizers cut the normalized pieces into words for the model (regex splits, whitespace, ...) and may
// rewrite them (ByteLevel's byte-to-character mapping, Metaspace's ▁).
#pragma once

#include <memory>
#include <vector>

#include "tokenizer/json_node.h"
#include "tokenizer/pieces.h"

namespace probekit::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces the pieces that are not added tokens by the words they are made of.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

/// Runs pre-tokenizers one after the other.
class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

/// Builds the pre-tokenizer a tokenizer.json node describes, keyed on its "type".
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node);

}  // namespace probekit::tokenizer
