#include "tokenizer/models/model.h"

#include "tokenizer/models/bpe/bpe_model.h"
#include "tokenizer/type_table.h"

namespace probekit::tokenizer {
namespace {

std::unique_ptr<Model> build_bpe(const JsonNode& node) { return BpeModel::from_json(node); }

constexpr TypeRow<Model> kModelTypes[] = {
    {"BPE", build_bpe},
    // The crate's types that are not built here yet.
    {"WordPiece", nullptr},
    {"Unigram", nullptr},
    {"WordLevel", nullptr},
};

}  // namespace

std::unique_ptr<Model> make_model(const JsonNode& node) {
  // Files from before models were tagged hold a bare BPE: the crate recognizes it by its merges.
  if (!node.find("type") && node.find("merges")) return BpeModel::from_json(node);
  return build_from_table(node, kModelTypes, "model type \"{0}\" is not supported yet (supported: {1})");
}

}  // namespace probekit::tokenizer
