#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizers/char_pre_tokenizers.h"
#include "tokenizer/pre_tokenizers/metaspace.h"
#include "tokenizer/pre_tokenizers/split_pre_tokenizer.h"
#include "tokenizer/read_pattern.h"
#include "tokenizer/type_table.h"

namespace probekit::tokenizer {
namespace {

std::unique_ptr<PreTokenizer> pre_tokenizer_sequence(const JsonNode& node) {
  return std::make_unique<SequencePreTokenizer>(build_each(node.at("pretokenizers"), make_pre_tokenizer));
}

std::unique_ptr<PreTokenizer> build_split(const JsonNode& node) {
  return std::make_unique<SplitPreTokenizer>(read_pattern(node.at("pattern")), read_split_behavior(node.at("behavior")),
                                             node.bool_or("invert", false));
}

std::unique_ptr<PreTokenizer> build_byte_level(const JsonNode& node) {
  return std::make_unique<ByteLevelPreTokenizer>(node.bool_or("add_prefix_space", true),
                                                 node.bool_or("use_regex", true));
}

std::unique_ptr<PreTokenizer> build_metaspace(const JsonNode& node) {
  char32_t replacement;
  PrependScheme scheme;
  read_metaspace(node, replacement, scheme);
  return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, node.bool_or("split", true));
}

std::unique_ptr<PreTokenizer> build_whitespace_split(const JsonNode&) {
  return std::make_unique<CharClassPreTokenizer>(CharClass::kWhitespace, SplitBehavior::kRemoved);
}

std::unique_ptr<PreTokenizer> build_punctuation(const JsonNode& node) {
  std::optional<JsonNode> behavior = node.find("behavior");
  return std::make_unique<CharClassPreTokenizer>(
      CharClass::kPunctuation, behavior ? read_split_behavior(*behavior) : SplitBehavior::kIsolated);
}

std::unique_ptr<PreTokenizer> build_digits(const JsonNode& node) {
  bool individual = node.bool_or("individual_digits", false);
  return std::make_unique<CharClassPreTokenizer>(
      CharClass::kNumeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
}

std::unique_ptr<PreTokenizer> build_char_delimiter_split(const JsonNode& node) {
  return std::make_unique<CharClassPreTokenizer>(CharClass::kDelimiter, SplitBehavior::kRemoved,
                                                 node.at("delimiter").as_char());
}

constexpr TypeRow<PreTokenizer> kPreTokenizerTypes[] = {
    {"Split", build_split},
    {"ByteLevel", build_byte_level},
    {"Metaspace", build_metaspace},
    {"Whitespace", build_plain<PreTokenizer, WhitespacePreTokenizer>},
    {"WhitespaceSplit", build_whitespace_split},
    {"Punctuation", build_punctuation},
    {"Digits", build_digits},
    {"CharDelimiterSplit", build_char_delimiter_split},
    {"BertPreTokenizer", build_plain<PreTokenizer, BertPreTokenizer>},
    {"Sequence", pre_tokenizer_sequence},
    // The crate's types that are not built here yet.
    {"UnicodeScripts", nullptr},
    {"FixedLength", nullptr},
};

}  // namespace

void SequencePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) step->pre_tokenize(pieces);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  return build_from_table(node, kPreTokenizerTypes, "pre-tokenizer type \"{0}\" is not supported yet");
}

}  // namespace probekit::tokenizer
