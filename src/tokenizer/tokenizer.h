// A Hugging Face tokenizer loaded from tokenizer.json, giving the ids the `tokenizers` crate (0.23) gives:
// added tokens -> normalizer -> pre-tokenizer -> model -> post-processor, and the decoder on the way back.
//
// Input text is UTF-8. Python strings are always valid Unicode, so HF never sees invalid bytes; here each
// maximal invalid sequence is replaced with U+FFFD first, which is what decoding the bytes in Python with
// errors="replace" and then encoding would give.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace probekit::tokenizer {

class Tokenizer {
 public:
  /// Loads DIR/tokenizer.json when given a checkpoint directory, else the file itself; throws
  /// std::runtime_error naming the file and the place of any problem. tokenizer_config.json is not read:
  /// transformers 5 keeps tokenizer.json's post-processor whatever add_bos_token/add_eos_token say there.
  static Tokenizer from_file(const std::string& path_or_checkpoint_dir);
  /// Builds a tokenizer from tokenizer.json text; `source` names it in errors.
  static Tokenizer from_json(std::string_view json, const std::string& source = "tokenizer.json");

  /// Encodes one text; add_special_tokens only decides whether the post-processor adds BOS and the like.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// Encodes texts in parallel (OpenMP); the result is in input order and equals encode() of each.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                 bool add_special_tokens = true) const;
  /// Each token's byte span [start, end) in `text`, for ids that encode(text, false) gave: what each token stands
  /// for, one after the other (the crate's offsets, in bytes). Throws, naming the token and the byte, when the
  /// tokens do not spell `text` byte for byte (a normalizer that rewrites it, an added token that swallows spaces).
  std::vector<std::pair<size_t, size_t>> token_spans(const std::vector<int32_t>& ids, std::string_view text) const;
  /// Decodes ids to text; ids that are not in the vocabulary are skipped, as in the crate.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// The token string of an id (added tokens first); throws std::invalid_argument for an unknown id.
  std::string id_to_token(int32_t id) const;
  /// The token string of an id, or nothing for an id the tokenizer does not have.
  std::optional<std::string> find_token(int32_t id) const;
  /// The id of a token string, added tokens first.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token strings of ids, for display; an id past the vocabulary (a model's embedding rows may outnumber its
  /// tokenizer's tokens, and a model can generate one) shows as "", as decode() skips it.
  std::vector<std::string> tokens(const std::vector<int32_t>& ids) const;
  /// Vocabulary size including the added tokens that are not in the model vocabulary.
  size_t vocab_size() const;
  /// The id the post-processor puts first in front of a single sequence (BOS), if any.
  std::optional<int32_t> bos_id() const;
  /// Whether an id belongs to a special added token (<bos>, <|im_start|>, ...).
  bool is_special(int32_t id) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace probekit::tokenizer
