// Building a BPE model: the vocabulary indexes, the merges resolved to ids, and reading it from tokenizer.json.
#include <algorithm>
#include <array>
#include <atomic>

#include "common/error.h"
#include "tokenizer/models/bpe/bpe_model.h"
#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

std::atomic<uint64_t> next_serial{1};

}  // namespace

BpeModel::BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)), serial_(next_serial++) {
  int32_t max_id = -1;
  vocab_.for_each([&](std::string_view, int32_t id) { max_id = std::max(max_id, id); });
  if (max_id >= (1 << 28)) fail_input("vocabulary id {} is too large", max_id);
  tokens_by_id_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  bmp_char_ids_.assign(0x10000, -1);
  vocab_.for_each([&](std::string_view token, int32_t id) {
    if (has_id_[id]) {
      fail_input("model.vocab: id {} is given to both \"{}\" and \"{}\" (each id must name one token)", id,
                 tokens_by_id_[id], token);
    }
    tokens_by_id_[id] = std::string(token);
    has_id_[id] = true;
    size_t pos = 0;
    if (!token.empty()) {
      char32_t cp = next_code_point(token, pos);
      if (pos == token.size() && cp < 0x10000) bmp_char_ids_[cp] = id;
    }
  });
  byte_ids_.assign(256, -1);
  for (int byte = 0; byte < 256; byte++) byte_ids_[byte] = vocab_.find(fmt::format("<0x{:02X}>", byte));

  merges_.reserve(merges.size());
  // Merges are resolved in batches, each lookup's cache line requested before it is needed: half a
  // million merges against a vocabulary of megabytes would otherwise wait on memory at every step.
  constexpr size_t kBatch = 64;
  size_t prefix_size = options_.continuing_subword_prefix.size();
  std::array<std::string, kBatch> merged;
  std::array<uint64_t, kBatch> left_hash, right_hash, merged_hash;
  std::array<int32_t, kBatch> left_id, right_id, new_id;
  for (size_t begin = 0; begin < merges.size(); begin += kBatch) {
    size_t count = std::min(kBatch, merges.size() - begin);
    for (size_t i = 0; i < count; i++) {
      left_hash[i] = StringIdMap::hash(merges[begin + i].first);
      right_hash[i] = StringIdMap::hash(merges[begin + i].second);
      vocab_.prefetch(left_hash[i]);
      vocab_.prefetch(right_hash[i]);
    }
    for (size_t i = 0; i < count; i++) {
      size_t rank = begin + i;
      auto [left, right] = merges[rank];
      left_id[i] = vocab_.find(left, left_hash[i]);
      right_id[i] = vocab_.find(right, right_hash[i]);
      if (left_id[i] < 0) fail_input("merge {} (\"{} {}\"): \"{}\" is not in the vocabulary", rank, left, right, left);
      if (right_id[i] < 0) fail_input("merge {} (\"{} {}\"): \"{}\" is not in the vocabulary", rank, left, right, right);
      if (right.size() < prefix_size) fail_input("merge {}: \"{}\" is shorter than the subword prefix", rank, right);
      // The right part loses its continuing_subword_prefix in the merged token.
      merged[i].assign(left);
      merged[i].append(right.substr(prefix_size));
      merged_hash[i] = StringIdMap::hash(merged[i]);
      vocab_.prefetch(merged_hash[i]);
    }
    for (size_t i = 0; i < count; i++) {
      size_t rank = begin + i;
      new_id[i] = vocab_.find(merged[i], merged_hash[i]);
      if (new_id[i] < 0) {
        fail_input("merge {} (\"{} {}\"): \"{}\" is not in the vocabulary", rank, merges[rank].first,
                   merges[rank].second, merged[i]);
      }
      merges_.prefetch(left_id[i], right_id[i]);
    }
    for (size_t i = 0; i < count; i++) {
      merges_.set(left_id[i], right_id[i], MergeTarget{static_cast<uint32_t>(begin + i), new_id[i]});
    }
  }
}

std::unique_ptr<BpeModel> BpeModel::from_json(const JsonNode& node) {
  if (std::optional<JsonNode> dropout = node.find("dropout"); dropout && dropout->as_double() != 0.0) {
    dropout->fail("BPE dropout is not supported (encoding must be deterministic)");
  }
  BpeOptions options;
  if (std::optional<JsonNode> unk = node.find("unk_token")) options.unk_token = std::string(unk->as_string());
  if (std::optional<JsonNode> prefix = node.find("continuing_subword_prefix")) {
    options.continuing_subword_prefix = prefix->as_string();
  }
  if (std::optional<JsonNode> suffix = node.find("end_of_word_suffix")) options.end_of_word_suffix = suffix->as_string();
  options.fuse_unk = node.bool_or("fuse_unk", false);
  options.byte_fallback = node.bool_or("byte_fallback", false);
  options.ignore_merges = node.bool_or("ignore_merges", false);

  // The vocabulary and merges are the bulk of the file: read them straight from simdjson.
  JsonNode vocab_node = node.at("vocab");
  simdjson::dom::object vocab_object;
  if (vocab_node.element().get_object().get(vocab_object) != simdjson::SUCCESS) vocab_node.fail("expected an object");
  StringIdMap vocab;
  vocab.reserve(vocab_object.size());
  // Inserted in batches with the slots prefetched, as the merges below.
  constexpr size_t kBatch = 64;
  std::array<std::pair<std::string_view, int32_t>, kBatch> batch;
  std::array<uint64_t, kBatch> hashes;
  size_t pending = 0;
  auto insert_batch = [&] {
    for (size_t i = 0; i < pending; i++) vocab.prefetch(hashes[i] = StringIdMap::hash(batch[i].first));
    for (size_t i = 0; i < pending; i++) vocab.set(batch[i].first, batch[i].second, hashes[i]);
    pending = 0;
  };
  for (auto [token, value] : vocab_object) {
    uint64_t id;
    if (value.get_uint64().get(id) != simdjson::SUCCESS || id > INT32_MAX) {
      vocab_node.fail("\"{}\": expected a non-negative integer id", token);
    }
    batch[pending++] = {token, static_cast<int32_t>(id)};
    if (pending == kBatch) insert_batch();
  }
  insert_batch();

  JsonNode merges_node = node.at("merges");
  simdjson::dom::array merges_array;
  if (merges_node.element().get_array().get(merges_array) != simdjson::SUCCESS) merges_node.fail("expected an array");
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  merges.reserve(merges_array.size());
  size_t index = 0;
  for (simdjson::dom::element item : merges_array) {
    auto fail_item = [&](const std::string& message) {
      JsonNode(item, fmt::format("{}[{}]", merges_node.path(), index), &merges_node.source()).fail("{}", message);
    };
    std::string_view line;
    simdjson::dom::array pair;
    if (item.get_string().get(line) == simdjson::SUCCESS) {
      if (line.substr(0, 8) != "#version") {
        size_t space = line.find(' ');
        if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
          fail_item(fmt::format("expected two tokens separated by one space, found \"{}\"", line));
        }
        merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      }
    } else if (item.get_array().get(pair) == simdjson::SUCCESS && pair.size() == 2 && pair.at(0).is_string() &&
               pair.at(1).is_string()) {
      merges.emplace_back(pair.at(0).get_string().value_unsafe(), pair.at(1).get_string().value_unsafe());
    } else {
      fail_item("expected \"a b\" or [\"a\", \"b\"]");
    }
    index++;
  }
  try {
    return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options));
  } catch (const std::invalid_argument& e) {
    node.fail("{}", e.what());
  }
}

}  // namespace probekit::tokenizer
