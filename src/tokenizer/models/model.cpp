#include "tokenizer/models/model.h"

#include "tokenizer/models/bpe/bpe_model.h"

namespace probekit::tokenizer {

std::unique_ptr<Model> make_model(const JsonNode& node) {
  // Files from before models were tagged hold a bare BPE: the crate recognizes it by its merges.
  if (!node.find("type") && node.find("merges")) return BpeModel::from_json(node);
  std::string type = node.type("BPE");
  if (type == "BPE") return BpeModel::from_json(node);
  if (type == "WordPiece" || type == "Unigram" || type == "WordLevel") {
    node.fail("model type \"{}\" is not supported yet (supported: BPE)", type);
  }
  node.fail("unknown type \"{}\" (supported: BPE)", type);
}

}  // namespace probekit::tokenizer
