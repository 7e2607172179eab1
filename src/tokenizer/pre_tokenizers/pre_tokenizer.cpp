#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizers/char_pre_tokenizers.h"
#include "tokenizer/pre_tokenizers/metaspace.h"
#include "tokenizer/pre_tokenizers/split_pre_tokenizer.h"
#include "tokenizer/read_pattern.h"

namespace probekit::tokenizer {

void SequencePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) step->pre_tokenize(pieces);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  static constexpr const char* kSupported =
      "Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit, "
      "BertPreTokenizer, Sequence";
  std::string type = node.type(kSupported);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const JsonNode& item : node.at("pretokenizers").items()) steps.push_back(make_pre_tokenizer(item));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(read_pattern(node.at("pattern")), read_split_behavior(node.at("behavior")),
                                               node.bool_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(node.bool_or("add_prefix_space", true),
                                                   node.bool_or("use_regex", true));
  }
  if (type == "Metaspace") {
    char32_t replacement;
    PrependScheme scheme;
    read_metaspace(node, replacement, scheme);
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, node.bool_or("split", true));
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharClassPreTokenizer>(CharClass::kWhitespace, SplitBehavior::kRemoved);
  }
  if (type == "Punctuation") {
    std::optional<JsonNode> behavior = node.find("behavior");
    return std::make_unique<CharClassPreTokenizer>(
        CharClass::kPunctuation, behavior ? read_split_behavior(*behavior) : SplitBehavior::kIsolated);
  }
  if (type == "Digits") {
    bool individual = node.bool_or("individual_digits", false);
    return std::make_unique<CharClassPreTokenizer>(
        CharClass::kNumeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "CharDelimiterSplit") {
    return std::make_unique<CharClassPreTokenizer>(CharClass::kDelimiter, SplitBehavior::kRemoved,
                                                   node.at("delimiter").as_char());
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "UnicodeScripts" || type == "FixedLength") node.fail("pre-tokenizer type \"{}\" is not supported yet", type);
  node.fail("unknown type \"{}\" (supported: {})", type, kSupported);
}

}  // namespace probekit::tokenizer
