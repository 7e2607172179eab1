// The model turns each word left by the pre-tokenizer into vocabulary ids. Only BPE is implemented:
// WordPiece, Unigram and WordLevel files are rejected with a clear error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/json_node.h"

namespace probekit::tokenizer {

class Model {
 public:
  virtual ~Model() = default;
  /// Appends the ids of one non-empty word.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids) const = 0;
  /// The id of a vocabulary entry, or -1.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  /// The vocabulary entry of an id, or nothing.
  virtual std::optional<std::string_view> id_to_token(int32_t id) const = 0;
  /// The number of vocabulary entries.
  virtual size_t vocab_size() const = 0;
};

/// Builds the model a tokenizer.json "model" node describes, keyed on its "type".
std::unique_ptr<Model> make_model(const JsonNode& node);

}  // namespace probekit::tokenizer
