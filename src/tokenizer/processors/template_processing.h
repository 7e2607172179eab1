// TemplateProcessing: the sequences and special tokens in the order a template lists them, e.g.
// "<bos> $A" for single sequences and "<bos> $A <bos> $B" for pairs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tokenizer/processors/post_processor.h"

namespace probekit::tokenizer {

/// One element of a template: input sequence A or B, or the special token named `special`.
struct TemplatePiece {
  bool is_sequence = false;
  size_t sequence = 0;  // 0 for A, 1 for B
  std::string special;
};

class TemplateProcessor : public PostProcessor {
 public:
  /// `special_tokens` maps each name used in the templates to its ids; throws std::invalid_argument when a
  /// template names a token that is not there.
  TemplateProcessor(std::vector<TemplatePiece> single, std::vector<TemplatePiece> pair,
                    std::map<std::string, std::vector<int32_t>> special_tokens);
  size_t added_tokens(bool is_pair) const override;
  void process(Encodings& encodings, bool add_special_tokens) const override;

  /// Reads a TemplateProcessing node.
  static std::unique_ptr<TemplateProcessor> from_json(const JsonNode& node);

 private:
  std::vector<TemplatePiece> single_, pair_;
  std::map<std::string, std::vector<int32_t>> special_tokens_;
};

}  // namespace probekit::tokenizer
