// Added tokens (special ones like <bos>, and tokens added on top of a trained vocabulary) are cut out of
// the input before normalization, as the crate's AddedVocabulary does: tokens with normalized=false are
// found in the raw text, the others in the normalized text of the pieces between them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/models/model.h"
#include "tokenizer/normalizers/normalizer.h"
#include "tokenizer/pieces.h"
#include "tokenizer/token_matcher.h"

namespace probekit::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;  // match only where no word character touches either side
  bool lstrip = false;       // take the whitespace before it into the token
  bool rstrip = false;       // take the whitespace after it into the token
  bool normalized = true;    // match against the normalized text
  bool special = false;      // skipped by decode(skip_special_tokens=true)

  bool operator==(const AddedToken& other) const;
};

class AddedVocabulary {
 public:
  /// Registers tokens in order: a token gets its id in the added or model vocabulary if it is there, the
  /// next free id after the model vocabulary otherwise (the crate ignores the ids written in the file).
  void add_tokens(const std::vector<AddedToken>& tokens, const Model& model, const Normalizer* normalizer);

  /// Cuts `text` into pieces: added tokens (with their id) and the normalized text between them.
  void extract_and_normalize(std::string_view text, const Normalizer* normalizer, std::vector<Piece>& pieces) const;

  /// The id of an added token's content, or -1.
  int32_t token_to_id(std::string_view content) const;
  /// The string decode uses for an added token id: its normalized form if normalization changed it.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  /// Whether `token` is the content of a special token.
  bool is_special(std::string_view token) const { return special_contents_.count(std::string(token)) != 0; }
  /// The added tokens by id.
  const std::map<int32_t, AddedToken>& tokens() const { return tokens_by_id_; }

 private:
  struct Split {
    Span span;
    int32_t token_id;
  };
  void rebuild_matchers();
  void find_tokens(std::string_view text, const TokenMatcher* matcher, std::vector<Split>& splits) const;

  std::unordered_map<std::string, int32_t> ids_by_content_;
  std::map<int32_t, AddedToken> tokens_by_id_;
  std::unordered_map<int32_t, std::string> normalized_forms_;
  std::unordered_set<std::string> special_contents_;
  std::unique_ptr<TokenMatcher> raw_matcher_;         // tokens with normalized=false
  std::unique_ptr<TokenMatcher> normalized_matcher_;  // tokens with normalized=true, by normalized form
};

}  // namespace probekit::tokenizer
