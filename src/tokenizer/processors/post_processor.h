// Post-processors add the special tokens around the encoded sequence(s): BOS for Llama and Gemma,
// [CLS] ... [SEP] for BERT. They run only when add_special_tokens is on, and only on ids here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_node.h"

namespace probekit::tokenizer {

/// The ids of each sequence; a processor may also split or merge them before the final concatenation.
using Encodings = std::vector<std::vector<int32_t>>;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// How many ids the processor adds to a single sequence or to a pair.
  virtual size_t added_tokens(bool is_pair) const = 0;
  /// Adds the special tokens (the crate's process_encodings).
  virtual void process(Encodings& encodings, bool add_special_tokens) const = 0;
};

/// One or two sequences through `processor` (may be null), concatenated: the crate's PostProcessor::process.
std::vector<int32_t> post_process(const PostProcessor* processor, std::vector<int32_t> first,
                                  const std::vector<int32_t>* second, bool add_special_tokens);

/// Runs processors one after the other.
class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  size_t added_tokens(bool is_pair) const override;
  void process(Encodings& encodings, bool add_special_tokens) const override;

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

/// BERT's [CLS] A [SEP] B [SEP], and RoBERTa's <s> A </s> </s> B </s> (`roberta`).
class BertProcessor : public PostProcessor {
 public:
  BertProcessor(int32_t cls_id, int32_t sep_id, bool roberta) : cls_id_(cls_id), sep_id_(sep_id), roberta_(roberta) {}
  size_t added_tokens(bool is_pair) const override;
  void process(Encodings& encodings, bool add_special_tokens) const override;

 private:
  int32_t cls_id_, sep_id_;
  bool roberta_;
};

/// ByteLevel as a processor only trims offsets: the ids pass unchanged.
class PassThroughProcessor : public PostProcessor {
 public:
  size_t added_tokens(bool) const override { return 0; }
  void process(Encodings&, bool) const override {}
};

/// Builds the post-processor a tokenizer.json node describes, keyed on its "type".
std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node);

}  // namespace probekit::tokenizer
