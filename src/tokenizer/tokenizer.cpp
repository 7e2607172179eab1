#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/utf8_text.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoders/decoder.h"
#include "tokenizer/models/model.h"
#include "tokenizer/normalizers/normalizer.h"
#include "tokenizer/pre_tokenizers/pre_tokenizer.h"
#include "tokenizer/processors/post_processor.h"
#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

// tokenizer.json "truncation": applied to the ids before the post-processor, leaving room for what it adds.
struct Truncation {
  size_t max_length = 0;
  bool from_left = false;
  bool only_second = false;  // fails on single sequences, as in the crate
};

// tokenizer.json "padding": applied after the post-processor.
struct Padding {
  std::optional<size_t> fixed_length;  // otherwise BatchLongest
  bool on_left = false;
  size_t multiple_of = 0;
  int32_t pad_id = 0;
};

Truncation read_truncation(const JsonNode& node) {
  Truncation truncation;
  truncation.max_length = static_cast<size_t>(node.at("max_length").as_int());
  if (std::optional<JsonNode> direction = node.find("direction")) truncation.from_left = direction->as_string() == "Left";
  if (std::optional<JsonNode> strategy = node.find("strategy")) truncation.only_second = strategy->as_string() == "OnlySecond";
  return truncation;
}

Padding read_padding(const JsonNode& node) {
  Padding padding;
  JsonNode strategy = node.at("strategy");
  if (strategy.is_object()) padding.fixed_length = static_cast<size_t>(strategy.at("Fixed").as_int());
  if (std::optional<JsonNode> direction = node.find("direction")) padding.on_left = direction->as_string() == "Left";
  if (std::optional<JsonNode> multiple = node.find("pad_to_multiple_of")) {
    padding.multiple_of = static_cast<size_t>(multiple->as_int());
  }
  if (std::optional<JsonNode> pad_id = node.find("pad_id")) padding.pad_id = static_cast<int32_t>(pad_id->as_int());
  return padding;
}

AddedToken read_added_token(const JsonNode& node) {
  AddedToken token;
  token.content = node.string_at("content");
  token.special = node.bool_or("special", false);
  token.single_word = node.bool_or("single_word", false);
  token.lstrip = node.bool_or("lstrip", false);
  token.rstrip = node.bool_or("rstrip", false);
  token.normalized = node.bool_or("normalized", !token.special);
  return token;
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::optional<Truncation> truncation;
  std::optional<Padding> padding;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  void pad(std::vector<int32_t>& ids, size_t length) const;
  /// The token string of an id, added tokens first; nullopt past the vocabulary.
  std::optional<std::string_view> find_token(int32_t id) const {
    std::optional<std::string_view> token = added.id_to_token(id);
    return token ? token : model->id_to_token(id);
  }

  int32_t token_to_id(std::string_view token) const {
    int32_t id = added.token_to_id(token);
    return id >= 0 ? id : model->token_to_id(token);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& source) {
  // Some editors save JSON with a UTF-8 byte-order mark; config.json is accepted with one, and so is this.
  json = without_byte_order_mark(json);
  simdjson::padded_string text(json);
  simdjson::dom::parser parser;
  JsonNode root = parse_json_document(parser, text, &source);
  if (std::optional<JsonNode> version = root.find("version"); version && version->as_string() != "1.0") {
    version->fail("unknown tokenizer.json version \"{}\" (supported: 1.0)", version->as_string());
  }
  auto impl = std::make_unique<Impl>();
  impl->model = make_model(root.at("model"));
  if (std::optional<JsonNode> node = root.find("normalizer")) impl->normalizer = make_normalizer(*node);
  if (std::optional<JsonNode> node = root.find("pre_tokenizer")) impl->pre_tokenizer = make_pre_tokenizer(*node);
  if (std::optional<JsonNode> node = root.find("post_processor")) impl->post_processor = make_post_processor(*node);
  if (std::optional<JsonNode> node = root.find("decoder")) impl->decoder = make_decoder(*node);
  if (std::optional<JsonNode> node = root.find("truncation")) impl->truncation = read_truncation(*node);
  if (std::optional<JsonNode> node = root.find("padding")) impl->padding = read_padding(*node);
  std::vector<AddedToken> added_tokens;
  if (std::optional<JsonNode> node = root.find("added_tokens")) {
    for (const JsonNode& item : node->items()) added_tokens.push_back(read_added_token(item));
  }
  impl->added.add_tokens(added_tokens, *impl->model, impl->normalizer.get());
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path_or_checkpoint_dir) {
  std::string path = is_directory(path_or_checkpoint_dir) ? path_or_checkpoint_dir + "/tokenizer.json"
                                                          : path_or_checkpoint_dir;
  if (!path_exists(path)) fail("{}: no such file", path);
  MappedFile file(path);
  return from_json(file.view(), path);
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  thread_local std::vector<Piece> pieces;
  added.extract_and_normalize(text, normalizer.get(), pieces);
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  for (const Piece& piece : pieces) {
    if (piece.token_id >= 0) {
      ids.push_back(piece.token_id);
    } else {
      model->tokenize(piece.text, ids);
    }
  }
  if (truncation) {
    if (truncation->only_second) fail_input("truncation strategy OnlySecond needs a pair of sequences");
    size_t added_count = add_special_tokens && post_processor ? post_processor->added_tokens(false) : 0;
    // The crate subtracts without a check: a max_length below what the processor adds wraps around in its
    // release builds, which means no truncation.
    size_t keep = truncation->max_length >= added_count ? truncation->max_length - added_count : SIZE_MAX;
    if (ids.size() > keep) {
      if (truncation->from_left) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
      ids.resize(keep);
    }
  }
  ids = post_process(post_processor.get(), std::move(ids), nullptr, add_special_tokens);
  if (padding) pad(ids, padding->fixed_length.value_or(ids.size()));
  return ids;
}

void Tokenizer::Impl::pad(std::vector<int32_t>& ids, size_t length) const {
  if (padding->multiple_of > 0 && length % padding->multiple_of != 0) {
    length += padding->multiple_of - length % padding->multiple_of;
  }
  if (ids.size() >= length) return;
  ids.insert(padding->on_left ? ids.begin() : ids.end(), length - ids.size(), padding->pad_id);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens) const {
  std::vector<std::vector<int32_t>> result(texts.size());
  std::exception_ptr error;
  std::mutex error_mutex;
  auto count = static_cast<std::ptrdiff_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (std::ptrdiff_t i = 0; i < count; i++) {
    try {
      result[i] = impl_->encode(texts[i], add_special_tokens);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  // Like the crate, BatchLongest padding then pads the whole batch to its longest encoding.
  if (impl_->padding && !impl_->padding->fixed_length) {
    size_t longest = 0;
    for (const auto& ids : result) longest = std::max(longest, ids.size());
    for (auto& ids : result) impl_->pad(ids, longest);
  }
  return result;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::optional<std::string_view> token = impl_->find_token(id);
    if (!token || (skip_special_tokens && impl_->added.is_special(*token))) continue;
    tokens.emplace_back(*token);
  }
  std::string text;
  if (impl_->decoder) {
    impl_->decoder->decode_chain(tokens);
    for (const std::string& token : tokens) text.append(token);
  } else {
    for (size_t i = 0; i < tokens.size(); i++) text.append(i == 0 ? "" : " ").append(tokens[i]);
  }
  return text;
}

std::vector<std::pair<size_t, size_t>> Tokenizer::token_spans(const std::vector<int32_t>& ids,
                                                             std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> spans;
  spans.reserve(ids.size());
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string bytes;
    if (std::optional<std::string_view> added = impl_->added.id_to_token(ids[i])) {
      bytes = std::string(*added);
      // An added token matched after normalization ("▁▁" for two spaces) stands for its decoded bytes.
      if (text.compare(at, bytes.size(), bytes) != 0 && impl_->decoder) bytes = impl_->decoder->token_bytes(bytes);
    } else {
      std::optional<std::string_view> token = impl_->model->id_to_token(ids[i]);
      if (!token) fail_input("token {} (id {}) is not in the vocabulary", i, ids[i]);
      bytes = impl_->decoder ? impl_->decoder->token_bytes(std::string(*token)) : std::string(*token);
    }
    // A space the pre-tokenizer put in front (Metaspace's prepended "▁") is not in the text.
    if (text.compare(at, bytes.size(), bytes) != 0 && !bytes.empty() && bytes.front() == ' ' &&
        text.compare(at, bytes.size() - 1, std::string_view(bytes).substr(1)) == 0) {
      bytes.erase(0, 1);
    }
    if (text.compare(at, bytes.size(), bytes) != 0) {
      fail_input("token {} (id {}, {}) does not spell the text at byte {}: the tokenizer rewrites the text, so its "
                 "tokens' spans are unknown",
                 i, ids[i], dump_json(Json(bytes)), at);
    }
    spans.emplace_back(at, at + bytes.size());
    at += bytes.size();
  }
  if (at != text.size()) fail_input("the {} tokens spell {} of the text's {} bytes", ids.size(), at, text.size());
  return spans;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  std::optional<std::string> token = find_token(id);
  if (!token) fail_input("token id {} is not in the vocabulary", id);
  return *token;
}

std::optional<std::string> Tokenizer::find_token(int32_t id) const {
  std::optional<std::string_view> token = impl_->find_token(id);
  return token ? std::optional<std::string>(*token) : std::nullopt;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  int32_t id = impl_->token_to_id(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::vector<std::string> Tokenizer::tokens(const std::vector<int32_t>& ids) const {
  std::vector<std::string> result;
  result.reserve(ids.size());
  for (int32_t id : ids) {
    std::optional<std::string_view> token = impl_->find_token(id);
    result.emplace_back(token ? *token : std::string_view());
  }
  return result;
}

size_t Tokenizer::vocab_size() const {
  size_t size = impl_->model->vocab_size();
  for (const auto& [id, token] : impl_->added.tokens()) {
    if (impl_->model->token_to_id(token.content) < 0) size++;
  }
  return size;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  // Whatever the post-processor puts before a one-id sequence (a sentinel) is the BOS.
  constexpr int32_t kSentinel = -1;
  std::vector<int32_t> processed = post_process(impl_->post_processor.get(), {kSentinel}, nullptr, true);
  if (processed.empty() || processed[0] == kSentinel) return std::nullopt;
  return processed[0];
}

bool Tokenizer::is_special(int32_t id) const {
  auto token = impl_->added.tokens().find(id);
  return token != impl_->added.tokens().end() && token->second.special;
}

}  // namespace probekit::tokenizer
