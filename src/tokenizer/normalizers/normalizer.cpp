#include "tokenizer/normalizers/normalizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizers/text_normalizers.h"
#include "tokenizer/normalizers/unicode_normalizers.h"
#include "tokenizer/read_pattern.h"

namespace probekit::tokenizer {

void SequenceNormalizer::normalize(std::string& text) const {
  for (const auto& normalizer : normalizers_) normalizer->normalize(text);
}

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  static constexpr const char* kSupported =
      "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents, Nmt, ByteLevel, Sequence";
  std::string type = node.type(kSupported);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> normalizers;
    for (const JsonNode& item : node.at("normalizers").items()) normalizers.push_back(make_normalizer(item));
    return std::make_unique<SequenceNormalizer>(std::move(normalizers));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(read_pattern(node.at("pattern")), node.string_at("content"));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(node.string_at("prepend"));
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(node.at("strip_left").as_bool(), node.at("strip_right").as_bool());
  }
  if (type == "BertNormalizer" || type == "Bert" || type == "Precompiled") {
    node.fail("normalizer type \"{}\" is not supported yet", type);
  }
  node.fail("unknown type \"{}\" (supported: {})", type, kSupported);
}

}  // namespace probekit::tokenizer
