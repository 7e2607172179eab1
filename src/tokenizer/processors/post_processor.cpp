#include "tokenizer/processors/post_processor.h"

#include "tokenizer/processors/template_processing.h"
#include "tokenizer/type_table.h"

namespace probekit::tokenizer {
namespace {

// BertProcessing and RobertaProcessing store their tokens as ["[CLS]", 101].
int32_t read_token_id(const JsonNode& node) {
  std::vector<JsonNode> pair = node.items();
  if (pair.size() != 2) node.fail("expected [token, id]");
  return static_cast<int32_t>(pair[1].as_int());
}

std::unique_ptr<PostProcessor> post_processor_sequence(const JsonNode& node) {
  return std::make_unique<SequenceProcessor>(build_each(node.at("processors"), make_post_processor));
}

std::unique_ptr<PostProcessor> build_template(const JsonNode& node) { return TemplateProcessor::from_json(node); }

// BertProcessing and RobertaProcessing differ only in the separators around the second sequence.
template <bool kRoberta>
std::unique_ptr<PostProcessor> build_bert(const JsonNode& node) {
  return std::make_unique<BertProcessor>(read_token_id(node.at("cls")), read_token_id(node.at("sep")), kRoberta);
}

constexpr TypeRow<PostProcessor> kPostProcessorTypes[] = {
    {"TemplateProcessing", build_template},
    {"ByteLevel", build_plain<PostProcessor, PassThroughProcessor>},
    {"BertProcessing", build_bert<false>},
    {"RobertaProcessing", build_bert<true>},
    {"Sequence", post_processor_sequence},
};

}  // namespace

std::vector<int32_t> post_process(const PostProcessor* processor, std::vector<int32_t> first,
                                  const std::vector<int32_t>* second, bool add_special_tokens) {
  if (processor == nullptr) {
    if (second != nullptr) first.insert(first.end(), second->begin(), second->end());
    return first;
  }
  Encodings encodings;
  encodings.push_back(std::move(first));
  if (second != nullptr) encodings.push_back(*second);
  processor->process(encodings, add_special_tokens);
  if (encodings.size() == 1) return std::move(encodings[0]);
  std::vector<int32_t> ids;
  for (const auto& encoding : encodings) ids.insert(ids.end(), encoding.begin(), encoding.end());
  return ids;
}

size_t SequenceProcessor::added_tokens(bool is_pair) const {
  size_t count = 0;
  for (const auto& step : steps_) count += step->added_tokens(is_pair);
  return count;
}

void SequenceProcessor::process(Encodings& encodings, bool add_special_tokens) const {
  for (const auto& step : steps_) step->process(encodings, add_special_tokens);
}

size_t BertProcessor::added_tokens(bool is_pair) const {
  if (!is_pair) return 2;
  return roberta_ ? 4 : 3;
}

void BertProcessor::process(Encodings& encodings, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  for (size_t i = 0; i < encodings.size(); i++) {
    std::vector<int32_t>& ids = encodings[i];
    if (i == 0) {
      ids.insert(ids.begin(), cls_id_);
    } else if (roberta_) {
      ids.insert(ids.begin(), sep_id_);
    }
    ids.push_back(sep_id_);
  }
}

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node) {
  return build_from_table(node, kPostProcessorTypes);
}

}  // namespace probekit::tokenizer
