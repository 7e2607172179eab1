#include "tokenizer/processors/template_processing.h"

#include "common/error.h"

namespace probekit::tokenizer {
namespace {

std::vector<TemplatePiece> read_template(const JsonNode& node) {
  std::vector<TemplatePiece> pieces;
  for (const JsonNode& item : node.items()) {
    TemplatePiece piece;
    if (std::optional<JsonNode> sequence = item.find("Sequence")) {
      piece.is_sequence = true;
      std::string_view id = sequence->at("id").as_string();
      if (id != "A" && id != "B") sequence->at("id").fail("expected \"A\" or \"B\", found \"{}\"", id);
      piece.sequence = id == "A" ? 0 : 1;
    } else if (std::optional<JsonNode> special = item.find("SpecialToken")) {
      piece.special = special->string_at("id");
    } else {
      item.fail("expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}");
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

}  // namespace

TemplateProcessor::TemplateProcessor(std::vector<TemplatePiece> single, std::vector<TemplatePiece> pair,
                                     std::map<std::string, std::vector<int32_t>> special_tokens)
    : single_(std::move(single)), pair_(std::move(pair)), special_tokens_(std::move(special_tokens)) {
  for (const auto* pieces : {&single_, &pair_}) {
    for (const TemplatePiece& piece : *pieces) {
      if (!piece.is_sequence && special_tokens_.count(piece.special) == 0) {
        fail_input("template uses special token \"{}\" missing from special_tokens", piece.special);
      }
    }
  }
}

size_t TemplateProcessor::added_tokens(bool is_pair) const {
  size_t count = 0;
  for (const TemplatePiece& piece : is_pair ? pair_ : single_) {
    if (!piece.is_sequence) count += special_tokens_.at(piece.special).size();
  }
  return count;
}

void TemplateProcessor::process(Encodings& encodings, bool add_special_tokens) const {
  if (encodings.size() != 1 && encodings.size() != 2) fail_input("a template applies to one or two sequences");
  const std::vector<TemplatePiece>& pieces = encodings.size() == 2 ? pair_ : single_;
  Encodings result;
  for (const TemplatePiece& piece : pieces) {
    if (piece.is_sequence) {
      if (piece.sequence >= encodings.size()) fail_input("the single-sequence template uses $B");
      result.push_back(encodings[piece.sequence]);
    } else if (add_special_tokens) {
      result.push_back(special_tokens_.at(piece.special));
    }
  }
  encodings.swap(result);
}

std::unique_ptr<TemplateProcessor> TemplateProcessor::from_json(const JsonNode& node) {
  std::map<std::string, std::vector<int32_t>> special_tokens;
  JsonNode tokens_node = node.at("special_tokens");
  if (!tokens_node.is_object()) tokens_node.fail("expected an object");
  for (auto [key, value] : tokens_node.element().get_object()) {
    JsonNode entry(value, fmt::format("{}.{}", tokens_node.path(), key), &node.source());
    std::vector<int32_t> ids;
    for (const JsonNode& id : entry.at("ids").items()) ids.push_back(static_cast<int32_t>(id.as_int()));
    special_tokens[std::string(key)] = std::move(ids);
  }
  try {
    return std::make_unique<TemplateProcessor>(read_template(node.at("single")), read_template(node.at("pair")),
                                               std::move(special_tokens));
  } catch (const std::invalid_argument& e) {
    node.fail("{}", e.what());
  }
}

}  // namespace probekit::tokenizer
