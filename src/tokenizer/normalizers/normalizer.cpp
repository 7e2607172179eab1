#include "tokenizer/normalizers/normalizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizers/text_normalizers.h"
#include "tokenizer/normalizers/unicode_normalizers.h"
#include "tokenizer/read_pattern.h"
#include "tokenizer/type_table.h"

namespace probekit::tokenizer {
namespace {

std::unique_ptr<Normalizer> normalizer_sequence(const JsonNode& node) {
  return std::make_unique<SequenceNormalizer>(build_each(node.at("normalizers"), make_normalizer));
}

template <UnicodeForm kForm>
std::unique_ptr<Normalizer> build_unicode(const JsonNode&) {
  return std::make_unique<UnicodeNormalizer>(kForm);
}

std::unique_ptr<Normalizer> build_replace(const JsonNode& node) {
  return std::make_unique<ReplaceNormalizer>(read_pattern(node.at("pattern")), node.string_at("content"));
}

std::unique_ptr<Normalizer> build_prepend(const JsonNode& node) {
  return std::make_unique<PrependNormalizer>(node.string_at("prepend"));
}

std::unique_ptr<Normalizer> build_strip(const JsonNode& node) {
  return std::make_unique<StripNormalizer>(node.at("strip_left").as_bool(), node.at("strip_right").as_bool());
}

constexpr TypeRow<Normalizer> kNormalizerTypes[] = {
    {"NFC", build_unicode<UnicodeForm::kNFC>},
    {"NFD", build_unicode<UnicodeForm::kNFD>},
    {"NFKC", build_unicode<UnicodeForm::kNFKC>},
    {"NFKD", build_unicode<UnicodeForm::kNFKD>},
    {"Lowercase", build_plain<Normalizer, LowercaseNormalizer>},
    {"Replace", build_replace},
    {"Prepend", build_prepend},
    {"Strip", build_strip},
    {"StripAccents", build_plain<Normalizer, StripAccentsNormalizer>},
    {"Nmt", build_plain<Normalizer, NmtNormalizer>},
    {"ByteLevel", build_plain<Normalizer, ByteLevelNormalizer>},
    {"Sequence", normalizer_sequence},
    // The crate's types that are not built here yet.
    {"BertNormalizer", nullptr},
    {"Bert", nullptr},
    {"Precompiled", nullptr},
};

}  // namespace

void SequenceNormalizer::normalize(std::string& text) const {
  for (const auto& normalizer : normalizers_) normalizer->normalize(text);
}

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  return build_from_table(node, kNormalizerTypes, "normalizer type \"{0}\" is not supported yet");
}

}  // namespace probekit::tokenizer
