#include "tokenizer/decoders/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/decoders/text_decoders.h"
#include "tokenizer/pre_tokenizers/metaspace.h"
#include "tokenizer/read_pattern.h"
#include "tokenizer/type_table.h"

namespace probekit::tokenizer {
namespace {

std::unique_ptr<Decoder> decoder_sequence(const JsonNode& node) {
  return std::make_unique<SequenceDecoder>(build_each(node.at("decoders"), make_decoder));
}

std::unique_ptr<Decoder> build_replace(const JsonNode& node) {
  return std::make_unique<ReplaceDecoder>(read_pattern(node.at("pattern")), node.string_at("content"));
}

std::unique_ptr<Decoder> build_strip(const JsonNode& node) {
  return std::make_unique<StripDecoder>(node.at("content").as_char(), static_cast<size_t>(node.at("start").as_int()),
                                        static_cast<size_t>(node.at("stop").as_int()));
}

std::unique_ptr<Decoder> build_metaspace(const JsonNode& node) {
  char32_t replacement;
  PrependScheme scheme;
  read_metaspace(node, replacement, scheme);
  return std::make_unique<MetaspaceDecoder>(replacement, scheme);
}

std::unique_ptr<Decoder> build_word_piece(const JsonNode& node) {
  std::optional<JsonNode> prefix = node.find("prefix");
  return std::make_unique<WordPieceDecoder>(prefix ? std::string(prefix->as_string()) : "##",
                                            node.bool_or("cleanup", true));
}

std::unique_ptr<Decoder> build_bpe(const JsonNode& node) {
  std::optional<JsonNode> suffix = node.find("suffix");
  return std::make_unique<BpeDecoder>(suffix ? std::string(suffix->as_string()) : "</w>");
}

constexpr TypeRow<Decoder> kDecoderTypes[] = {
    {"ByteLevel", build_plain<Decoder, ByteLevelDecoder>},
    {"Replace", build_replace},
    {"ByteFallback", build_plain<Decoder, ByteFallbackDecoder>},
    {"Fuse", build_plain<Decoder, FuseDecoder>},
    {"Strip", build_strip},
    {"Metaspace", build_metaspace},
    {"WordPiece", build_word_piece},
    {"BPEDecoder", build_bpe},
    {"Sequence", decoder_sequence},
    // The crate's types that are not built here yet.
    {"CTC", nullptr},
};

}  // namespace

std::string Decoder::token_bytes(std::string token) const {
  std::vector<std::string> tokens = {std::move(token)};
  decode_chain(tokens);
  std::string joined;
  for (const std::string& part : tokens) joined += part;
  return joined;
}

void SequenceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (const auto& step : steps_) step->decode_chain(tokens);
}

std::string SequenceDecoder::token_bytes(std::string token) const {
  for (const auto& step : steps_) token = step->token_bytes(std::move(token));
  return token;
}

std::unique_ptr<Decoder> make_decoder(const JsonNode& node) {
  return build_from_table(node, kDecoderTypes, "decoder type \"{0}\" is not supported yet");
}

}  // namespace probekit::tokenizer
