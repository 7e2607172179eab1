#include "tokenizer/models/bpe/bpe_model.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

// As in the crate: words shorter than 256 bytes are cached, up to 10,000 per thread and model (the cache is
// cleared when full, which keeps it bounded without bookkeeping).
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kCacheCapacity = 10000;
constexpr size_t kMaxModelsPerThread = 8;

struct StringHash {
  size_t operator()(const std::string& s) const { return hash_bytes(s.data(), s.size()); }
};
using WordCache = std::unordered_map<std::string, std::vector<int32_t>, StringHash>;

WordCache& word_cache(uint64_t serial) {
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  auto found = caches.find(serial);
  if (found != caches.end()) return found->second;
  if (caches.size() >= kMaxModelsPerThread) caches.clear();  // models come and go rarely
  return caches[serial];
}

// A pair that may merge: popped lowest rank first, then leftmost.
struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
  int32_t left;  // the pair it was computed for, to skip the stale-entry lookup when nothing changed
  int32_t right;
};

struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_by_id_.size() || !has_id_[id]) return std::nullopt;
  return tokens_by_id_[id];
}

int32_t BpeModel::unk_id() const {
  int32_t id = vocab_.find(*options_.unk_token);
  if (id < 0) fail("unk_token \"{}\" is not in the vocabulary", *options_.unk_token);
  return id;
}

void BpeModel::split_into_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  const std::string& prefix = options_.continuing_subword_prefix;
  const std::string& suffix = options_.end_of_word_suffix;
  auto add = [&symbols](int32_t id, int32_t length) {
    int32_t index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, length});
  };
  std::string decorated;
  int32_t pending_unk = -1, pending_unk_length = 0;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t start = pos;
    char32_t cp = next_code_point(word, pos);
    int32_t length = static_cast<int32_t>(pos - start);
    bool decorate = (start > 0 && !prefix.empty()) || (pos == word.size() && !suffix.empty());
    std::string_view symbol = word.substr(start, pos - start);
    if (decorate) {
      decorated.assign(start > 0 ? prefix : std::string());
      decorated.append(symbol);
      if (pos == word.size()) decorated.append(suffix);
      symbol = decorated;
    }
    int32_t id = !decorate && cp < 0x10000 ? bmp_char_ids_[cp] : vocab_.find(symbol);
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk, pending_unk_length);
      pending_unk = -1;
      add(id, length);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(symbol.begin(), symbol.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      // The unknown token still pending stays pending, exactly as in the crate.
      for (char c : symbol) add(byte_ids_[static_cast<unsigned char>(c)], 1);
      continue;
    }
    if (!options_.unk_token) continue;  // no unknown token: the character is dropped
    if (pending_unk >= 0 && options_.fuse_unk) {
      pending_unk_length += length;
    } else {
      if (pending_unk >= 0) add(pending_unk, pending_unk_length);
      pending_unk = unk_id();
      pending_unk_length = length;
    }
  }
  if (pending_unk >= 0) add(pending_unk, pending_unk_length);
}

void BpeModel::merge_symbols(std::vector<Symbol>& symbols) const {
  thread_local std::vector<Candidate> queue;
  queue.clear();
  size_t count = symbols.size();
  for (size_t i = 0; i + 1 < count; i++) merges_.prefetch(symbols[i].id, symbols[i + 1].id);
  for (size_t i = 0; i + 1 < count; i++) {
    if (const MergeTarget* merge = merges_.find(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({merge->rank, static_cast<uint32_t>(i), merge->new_id, symbols[i].id, symbols[i + 1].id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), LaterCandidate());
  auto push = [](const Candidate& candidate) {
    queue.push_back(candidate);
    std::push_heap(queue.begin(), queue.end(), LaterCandidate());
  };
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), LaterCandidate());
    Candidate top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[top.pos];
    if (current.length == 0 || current.next == -1) continue;
    Symbol right = symbols[current.next];
    // The crate re-checks an entry against the merge of the pair there now and keeps it when the merged id
    // is the same, even if the pair changed; only a changed pair needs the lookup.
    if (current.id != top.left || right.id != top.right) {
      const MergeTarget* now = merges_.find(current.id, right.id);
      if (now == nullptr || now->new_id != top.new_id) continue;
    }
    symbols[current.next].length = 0;
    current.id = top.new_id;
    current.length += right.length;
    current.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = static_cast<int32_t>(top.pos);
    if (current.prev >= 0) {
      const Symbol& previous = symbols[current.prev];
      if (const MergeTarget* merge = merges_.find(previous.id, current.id)) {
        push({merge->rank, static_cast<uint32_t>(current.prev), merge->new_id, previous.id, current.id});
      }
    }
    if (current.next >= 0) {
      const Symbol& next = symbols[current.next];
      if (const MergeTarget* merge = merges_.find(current.id, next.id)) {
        push({merge->rank, top.pos, merge->new_id, current.id, next.id});
      }
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    int32_t id = vocab_.find(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  WordCache* cache = nullptr;
  std::string key;
  if (word.size() < kMaxCachedWordBytes) {
    cache = &word_cache(serial_);
    key.assign(word);
    auto hit = cache->find(key);
    if (hit != cache->end()) {
      ids.insert(ids.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  split_into_symbols(word, symbols);
  merge_symbols(symbols);
  size_t first = ids.size();
  for (const Symbol& symbol : symbols) {
    if (symbol.length != 0) ids.push_back(symbol.id);
  }
  if (cache != nullptr) {
    if (cache->size() >= kCacheCapacity) cache->clear();
    cache->emplace(std::move(key), std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()));
  }
}

}  // namespace probekit::tokenizer
