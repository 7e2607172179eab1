// The BPE model on tiny vocabularies (most cases are the crate's own unit tests), and the merge order.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/models/bpe/bpe_model.h"
#include "tokenizer/json_node.h"
#include "json_snippet.h"

using namespace probekit::tokenizer;

namespace {

std::unique_ptr<BpeModel> bpe(const std::string& json) {
  JsonSnippet snippet(json);
  return BpeModel::from_json(*snippet.root);
}

std::vector<int32_t> tokenize(const BpeModel& model, const std::string& word) {
  std::vector<int32_t> ids;
  model.tokenize(word, ids);
  return ids;
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("BPE: unknown characters, fused or not") {
  const char* vocab = R"("vocab": {"<unk>": 0, "a": 1, "b": 2}, "merges": [], "unk_token": "<unk>")";
  auto separate = bpe(std::string(R"({"type": "BPE", "fuse_unk": false, )") + vocab + "}");
  CHECK(tokenize(*separate, "c") == Ids{0});
  CHECK(tokenize(*separate, "cc") == Ids{0, 0});
  CHECK(tokenize(*separate, "accb") == Ids{1, 0, 0, 2});
  auto fused = bpe(std::string(R"({"type": "BPE", "fuse_unk": true, )") + vocab + "}");
  CHECK(tokenize(*fused, "cc") == Ids{0});
  CHECK(tokenize(*fused, "accb") == Ids{1, 0, 2});
  // Without an unknown token the character is dropped.
  auto dropping = bpe(R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})");
  CHECK(tokenize(*dropping, "aza") == Ids{0, 0});
}

TEST_CASE("BPE: byte fallback to <0xNN> tokens") {
  auto model = bpe(R"({"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "merges": [],
                       "vocab": {"<unk>": 0, "<0x61>": 1, "<0x0A>": 2, "<0xC3>": 3, "<0xA9>": 4, "x": 5}})");
  CHECK(tokenize(*model, "c") == Ids{0});  // no byte token for 'c': unknown
  CHECK(tokenize(*model, "a") == Ids{1});
  CHECK(tokenize(*model, "\n") == Ids{2});
  CHECK(tokenize(*model, "x\u00e9x") == Ids{5, 3, 4, 5});  // é is two bytes
}

TEST_CASE("BPE: merges as strings and as pairs give the same ids, lowest rank first") {
  const char* vocab = R"("vocab": {"u": 0, "n": 1, "r": 2, "e": 3, "l": 4, "a": 5, "t": 6, "d": 7, "re": 8, "at": 9,
                         "ed": 10, "un": 11, "ated": 12, "rel": 13, "related": 14, "unrelated": 15, "edun": 16})";
  auto strings = bpe(std::string(R"({"type": "BPE", )") + vocab +
                     R"(, "merges": ["r e", "a t", "e d", "u n", "at ed", "ed un", "re l", "rel ated", "un related"]})");
  auto pairs = bpe(std::string(R"({"type": "BPE", )") + vocab +
                   R"(, "merges": [["r", "e"], ["a", "t"], ["e", "d"], ["u", "n"], ["at", "ed"], ["ed", "un"],
                                   ["re", "l"], ["rel", "ated"], ["un", "related"]]})");
  CHECK(tokenize(*strings, "unrelated") == Ids{15});
  CHECK(tokenize(*pairs, "unrelated") == Ids{15});
  // "a t" (rank 1) runs before "e d" (rank 2): "ated" forms, "ed un" never gets its chance.
  CHECK(tokenize(*strings, "ated") == Ids{12});
  // Equal ranks go leftmost first: "aaa" with only "a a" merges to "aa" + "a".
  auto repeat = bpe(R"({"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]})");
  CHECK(tokenize(*repeat, "aaa") == Ids{1, 0});
  CHECK(tokenize(*repeat, "aaaa") == Ids{1, 1});
}

TEST_CASE("BPE: ignore_merges takes whole words from the vocabulary") {
  const char* vocab = R"("vocab": {".:.:": 0, "\u0120belirtilen": 1, ".": 2, ":": 3, "bel": 4, "irtilen": 5, "\u0120": 6,
      ".:": 7, "belirtilen": 8, ".:.": 9, "be": 10, "l": 11, "ir": 12, "ti": 13, "en": 14, "irtil": 15, "irti": 16,
      "i": 17, "r": 18, "t": 19, "b": 20, "e": 21, "n": 22},
      "merges": [". :", "b e", "be l", "i r", "t i", "ir ti", "e n", "irti l"])";
  auto ignoring = bpe(std::string(R"({"type": "BPE", "ignore_merges": true, )") + vocab + "}");
  CHECK(tokenize(*ignoring, ".:.:") == Ids{0});
  CHECK(tokenize(*ignoring, "\u0120belirtilen") == Ids{1});
  auto merging = bpe(std::string(R"({"type": "BPE", "ignore_merges": false, )") + vocab + "}");
  CHECK(tokenize(*merging, ".:.:") == Ids{7, 7});
  CHECK(tokenize(*merging, "\u0120belirtilen") == Ids{6, 4, 15, 14});
}

TEST_CASE("BPE: continuing_subword_prefix and end_of_word_suffix") {
  auto prefixed = bpe(R"({"type": "BPE", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                          "vocab": {"a": 0, "##b": 1, "##c": 2, "ab": 3, "abc": 4, "[UNK]": 5},
                          "merges": [["a", "##b"], ["ab", "##c"]]})");
  CHECK(tokenize(*prefixed, "ab") == Ids{3});
  CHECK(tokenize(*prefixed, "abc") == Ids{4});
  CHECK(tokenize(*prefixed, "ba") == Ids{5, 5});  // "b" and "##a" are unknown
  auto suffixed = bpe(R"({"type": "BPE", "end_of_word_suffix": "</w>",
                          "vocab": {"a": 0, "b": 1, "b</w>": 2, "ab</w>": 3, "a</w>": 4},
                          "merges": [["a", "b</w>"]]})");
  CHECK(tokenize(*suffixed, "ab") == Ids{3});
  CHECK(tokenize(*suffixed, "ba") == Ids{1, 4});
}

TEST_CASE("BPE: vocabulary lookups and load errors") {
  auto model = bpe(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})");
  CHECK(model->token_to_id("ab") == 2);
  CHECK(model->token_to_id("ba") == -1);
  CHECK(model->id_to_token(1) == std::optional<std::string_view>("b"));
  CHECK_FALSE(model->id_to_token(7).has_value());
  CHECK(model->vocab_size() == 3);
  CHECK_THROWS_WITH(bpe(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})"),
                    doctest::Contains("tokenizer.json: merge 0 (\"a b\"): \"b\" is not in the vocabulary"));
  CHECK_THROWS_WITH(bpe(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]})"),
                    doctest::Contains("tokenizer.json: merges[0]: expected two tokens separated by one space"));
  CHECK_THROWS_WITH(bpe(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1})"),
                    doctest::Contains("dropout: BPE dropout is not supported"));
  CHECK_NOTHROW(bpe(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": null})"));
}

TEST_CASE("model factory: BPE with or without its type tag, other models rejected") {
  JsonSnippet untagged(R"({"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})");
  std::vector<int32_t> ids;
  make_model(*untagged.root)->tokenize("ab", ids);
  CHECK(ids == Ids{2});
  JsonSnippet wordpiece(R"({"type": "WordPiece", "vocab": {}})");
  CHECK_THROWS_WITH(make_model(*wordpiece.root), "tokenizer.json: model type \"WordPiece\" is not supported yet (supported: BPE)");
}
