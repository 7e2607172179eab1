// Normalizers rewrite each piece of input text between added tokens before pre-tokenization (NFC,
// Replace, Prepend, ...). They work on plain UTF-8 strings: nothing downstream needs offsets.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_node.h"

namespace probekit::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Rewrites `text` (valid UTF-8) in place.
  virtual void normalize(std::string& text) const = 0;
};

/// Runs normalizers one after the other.
class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> normalizers)
      : normalizers_(std::move(normalizers)) {}
  void normalize(std::string& text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
};

/// Builds the normalizer a tokenizer.json node describes, keyed on its "type".
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node);

}  // namespace probekit::tokenizer
