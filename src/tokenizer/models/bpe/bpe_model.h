// Byte-pair encoding as the crate's models/bpe: a word starts as one symbol per character (or its
// <0xNN> bytes, or the unknown token), then the pair with the lowest merge rank is merged, leftmost first,
// until no adjacent pair has a merge.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/flat_maps.h"
#include "tokenizer/models/model.h"

namespace probekit::tokenizer {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // put before every symbol but the first of a word
  std::string end_of_word_suffix;         // put after the last symbol of a word
  bool fuse_unk = false;                  // consecutive unknown characters give one unknown token
  bool byte_fallback = false;             // unknown characters become their <0xNN> byte tokens
  bool ignore_merges = false;             // a word that is in the vocabulary is one token, merges or not
};

class BpeModel : public Model {
 public:
  /// `merges` in rank order; throws std::invalid_argument when a merge uses or makes a token that is not in
  /// the vocabulary.
  BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
           BpeOptions options);

  /// Reads a "model" node of type BPE (merges as "a b" strings or ["a", "b"] pairs).
  static std::unique_ptr<BpeModel> from_json(const JsonNode& node);

  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;
  int32_t token_to_id(std::string_view token) const override { return vocab_.find(token); }
  std::optional<std::string_view> id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
  };

  void split_into_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_symbols(std::vector<Symbol>& symbols) const;
  int32_t unk_id() const;

  StringIdMap vocab_;
  std::vector<std::string> tokens_by_id_;
  std::vector<bool> has_id_;           // ids may have gaps
  std::vector<int32_t> bmp_char_ids_;  // id of each single BMP code point token, -1 where none
  std::vector<int32_t> byte_ids_;      // id of each <0xNN> token, -1 where none
  PairMap merges_;
  BpeOptions options_;
  uint64_t serial_;  // tells this model's entries apart in the per-thread word caches
};

}  // namespace probekit::tokenizer
