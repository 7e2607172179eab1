// Added tokens (lstrip, rstrip, single_word, normalized; the crate's own cases), the Tokenizer facade
// (checkpoint directories included), and errors that name where in tokenizer.json the problem is.
#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/models/bpe/bpe_model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/normalizers/unicode_normalizers.h"

using namespace probekit::tokenizer;

namespace {

using Ids = std::vector<int32_t>;

// (piece text, token id or -1) as the crate's simplify_output lists splits.
using Splits = std::vector<std::pair<std::string, int32_t>>;

Splits extract(const AddedVocabulary& vocabulary, const Normalizer* normalizer, const std::string& text) {
  std::vector<Piece> pieces;
  vocabulary.extract_and_normalize(text, normalizer, pieces);
  Splits splits;
  for (const Piece& piece : pieces) splits.emplace_back(piece.text, piece.token_id);
  return splits;
}

AddedToken added(const std::string& content, bool special, bool lstrip = false, bool rstrip = false,
                 bool single_word = false) {
  AddedToken token;
  token.content = content;
  token.special = special;
  token.normalized = !special;  // AddedToken::from's default
  token.lstrip = lstrip;
  token.rstrip = rstrip;
  token.single_word = single_word;
  return token;
}

BpeModel empty_model() { return BpeModel(StringIdMap(), {}, BpeOptions()); }

// A byte-level tokenizer.json around `parts` (JSON members replacing the defaults below).
std::string tokenizer_json(const std::string& parts) {
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 4, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true},
                     {"id": 5, "content": "<tool>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}},
        {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [4], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "\u0120": 2, "\u0120a": 3, "<s>": 4}, "merges": ["\u0120 a"]})" +
         parts + "}";
}

std::string load_error(const std::string& json) {
  try {
    Tokenizer::from_json(json);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// A temporary checkpoint directory with a fixture's tokenizer.json and the given tokenizer_config.json.
struct CheckpointDir {
  CheckpointDir(const std::string& tokenizer, const std::string& config) {
    probekit::copy_tree(PROBEKIT_FIXTURES "/tokenizers/" + tokenizer + "/tokenizer.json", dir.file("tokenizer.json"));
    probekit::testing::write_text(dir.file("tokenizer_config.json"), config);
  }
  probekit::testing::TempDir dir;
};

}  // namespace

TEST_CASE("added tokens: normal and special tokens are cut out, ids follow the model vocabulary") {
  BpeModel model = empty_model();
  AddedVocabulary vocabulary;
  vocabulary.add_tokens({added("my", false), added("name", false)}, model, nullptr);
  vocabulary.add_tokens({added("[CLS]", true), added("[SEP]", true)}, model, nullptr);
  CHECK(extract(vocabulary, nullptr, "[CLS] My name is Anthony [SEP]") ==
        Splits{{"[CLS]", 2}, {" My ", -1}, {"name", 1}, {" is Anthony ", -1}, {"[SEP]", 3}});
  CHECK(vocabulary.is_special("[CLS]"));
  CHECK_FALSE(vocabulary.is_special("my"));
  CHECK(extract(vocabulary, nullptr, "").empty());
}

TEST_CASE("added tokens: lstrip, rstrip, single_word and normalized (the crate's options_use_cases)") {
  BpeModel model = empty_model();
  LowercaseNormalizer lowercase;
  AddedVocabulary vocabulary;
  vocabulary.add_tokens({added("my", false, true, true), added("name", false), added("ony", false, false, false, true)},
                        model, &lowercase);
  vocabulary.add_tokens({added("[CLS]", true), added("[SEP]", true)}, model, &lowercase);
  // " my " takes both spaces (lstrip, rstrip) and matches the lowercased text (normalized); "ony" is inside
  // a word (single_word).
  CHECK(extract(vocabulary, &lowercase, "[CLS] My name is Anthony [SEP]") ==
        Splits{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}});
}

TEST_CASE("added tokens: single_word boundaries and Unicode whitespace for lstrip/rstrip") {
  BpeModel model = empty_model();
  LowercaseNormalizer lowercase;
  AddedVocabulary single;
  single.add_tokens({added("<mask>", false, false, false, true)}, model, &lowercase);
  CHECK(extract(single, &lowercase, "<mask> My name <mask> A<mask> <mask>ony <mask>") ==
        Splits{{"<mask>", 0}, {" my name ", -1}, {"<mask>", 0}, {" a<mask> <mask>ony ", -1}, {"<mask>", 0}});
  // Punctuation is not a word character, a combining mark is.
  CHECK(extract(single, &lowercase, "<mask>, <mask>- \u25cc\u0330<mask>") ==
        Splits{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- \u25cc\u0330<mask>", -1}});
  AddedVocabulary stripping;
  stripping.add_tokens({added("<mask>", false, true, true, true)}, model, &lowercase);
  CHECK(extract(stripping, &lowercase, "Hi <mask> there\t<mask>\t<mask>\u2000") ==
        Splits{{"hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}});
}

TEST_CASE("added tokens: leftmost-longest matching") {
  BpeModel model = empty_model();
  AddedVocabulary vocabulary;
  vocabulary.add_tokens({added("\n", false), added("\n\n", false), added("ab", false), added("abc", false),
                         added("bcd", false)},
                        model, nullptr);
  // The earliest match wins over a longer one starting later; among those starting together, the longest.
  CHECK(extract(vocabulary, nullptr, "x\n\n\nabcd") == Splits{{"x", -1}, {"\n\n", 1}, {"\n", 0}, {"abc", 3}, {"d", -1}});
}

TEST_CASE("Tokenizer: encode, decode, special tokens, vocabulary") {
  Tokenizer tokenizer = Tokenizer::from_json(tokenizer_json(""));
  CHECK(tokenizer.encode("a a<s>b") == Ids{4, 0, 3, 4, 1});
  CHECK(tokenizer.encode("a a<s>b", false) == Ids{0, 3, 4, 1});
  CHECK(tokenizer.encode("<tool>a") == Ids{4, 5, 0});  // "<tool>" is not in the model: the next id after it
  CHECK(tokenizer.decode({4, 0, 3, 5}) == "<s>a a<tool>");
  CHECK(tokenizer.decode({4, 0, 3, 5}, true) == "a a<tool>");
  CHECK(tokenizer.decode({0, 99, 1}) == "ab");  // unknown ids are skipped
  CHECK(tokenizer.bos_id() == 4);
  CHECK(tokenizer.is_special(4));
  CHECK_FALSE(tokenizer.is_special(5));
  CHECK(tokenizer.vocab_size() == 6);
  CHECK(tokenizer.token_to_id("<tool>") == 5);
  CHECK(tokenizer.token_to_id("\u0120a") == 3);
  CHECK_FALSE(tokenizer.token_to_id("zz").has_value());
  CHECK(tokenizer.tokens({4, 0, 3}) == std::vector<std::string>{"<s>", "a", "\u0120a"});
  // Regression (a Qwen3-32B-shaped model generating through the real Qwen 3 tokenizer): an id of the model's
  // embedding rows past the tokenizer's vocabulary (151,936 rows, 151,669 tokens) shows as nothing, as decode skips
  // it, instead of ending the generation.
  CHECK(tokenizer.tokens({0, 99}) == std::vector<std::string>{"a", ""});
  CHECK_THROWS_AS(tokenizer.id_to_token(42), std::invalid_argument);
  // Invalid UTF-8 is read as Python's errors="replace" would: each bad sequence becomes U+FFFD.
  CHECK(tokenizer.encode("a\xff" "b") == tokenizer.encode("a\ufffd" "b"));
  CHECK(tokenizer.encode("") == Ids{4});
}

TEST_CASE("Tokenizer: truncation and padding from tokenizer.json") {
  std::string truncated = tokenizer_json("");
  truncated.replace(truncated.find("\"truncation\": null"), 18,
                    R"("truncation": {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0})");
  Tokenizer right = Tokenizer::from_json(truncated);
  CHECK(right.encode("ababab") == Ids{4, 0, 1});  // room left for the <s> the template adds
  CHECK(right.encode("ababab", false) == Ids{0, 1, 0});
  std::string padded = tokenizer_json("");
  padded.replace(padded.find("\"padding\": null"), 15,
                 R"("padding": {"strategy": {"Fixed": 5}, "direction": "Left", "pad_to_multiple_of": null,
                                "pad_id": 2, "pad_type_id": 0, "pad_token": "\u0120"})");
  CHECK(Tokenizer::from_json(padded).encode("ab") == Ids{2, 2, 4, 0, 1});
}

TEST_CASE("Tokenizer: a checkpoint directory's tokenizer_config.json does not change the ids") {
  // transformers 5.17 AutoTokenizer gave these for "hi" with each config next to the fixture's
  // tokenizer.json: add_bos_token/add_eos_token in the file leave tokenizer.json's post-processor alone.
  struct Variant {
    const char* tokenizer;
    const char* config;
    Ids hi;
  };
  const Variant variants[] = {
      {"spm_llama2", R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": true, "add_eos_token": true,
                         "bos_token": "<s>", "eos_token": "</s>"})", {1, 371, 313, 314}},
      {"spm_llama2", R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false})", {1, 371, 313, 314}},
      {"spm_gemma", R"({"tokenizer_class": "GemmaTokenizer", "add_bos_token": true, "add_eos_token": true,
                        "eos_token": "<eos>"})", {2, 316, 317}},
      {"bytelevel_llama3", R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false,
                               "add_eos_token": true, "eos_token": "<|end_of_text|>"})", {0, 73, 74}},
      {"bytelevel_qwen", R"({"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": true, "bos_token": "<|im_start|>"})",
       {74, 75}},
  };
  for (const Variant& variant : variants) {
    CheckpointDir dir(variant.tokenizer, variant.config);
    INFO(variant.tokenizer, " with ", variant.config);
    CHECK(Tokenizer::from_file(dir.dir.path()).encode("hi") == variant.hi);
  }
}

TEST_CASE("Tokenizer: errors name the file and the place in it") {
  auto replace = [](std::string json, const std::string& from, const std::string& to) {
    json.replace(json.find(from), from.size(), to);
    return json;
  };
  std::string base = tokenizer_json("");
  std::string sequence = replace(base, R"("pre_tokenizer": {)",
                                 R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, {"type": "Foo"}]}, "unused": {)");
  CHECK(load_error(sequence).find("tokenizer.json: pre_tokenizer.pretokenizers[1]: unknown type \"Foo\" (supported: Split,") == 0);
  CHECK(load_error(replace(base, R"("normalizer": null)", R"("normalizer": {"type": "Lowercased"})")) ==
        "tokenizer.json: normalizer: unknown type \"Lowercased\" (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, "
        "Prepend, Strip, StripAccents, Nmt, ByteLevel, Sequence)");
  CHECK(load_error(replace(base, R"("normalizer": null)", R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": ""})")) ==
        "tokenizer.json: normalizer: normalizer type \"Precompiled\" is not supported yet");
  CHECK(load_error(replace(base, R"("type": "BPE")", R"("type": "Unigram")")) ==
        "tokenizer.json: model: model type \"Unigram\" is not supported yet (supported: BPE)");
  CHECK(load_error(replace(base, R"("decoder": {"type": "ByteLevel")", R"("decoder": {"type": "Bytes")"))
            .find("tokenizer.json: decoder: unknown type \"Bytes\"") == 0);
  CHECK(load_error(replace(base, R"("post_processor": {"type": "TemplateProcessing")", R"("post_processor": {"type": "Tmpl")"))
            .find("tokenizer.json: post_processor: unknown type \"Tmpl\"") == 0);
  CHECK(load_error(replace(base, R"("use_regex": true},)", R"("use_regex": 1},)")) ==
        "tokenizer.json: pre_tokenizer.use_regex: expected a boolean, found an integer");
  CHECK(load_error(replace(base, R"({"type": "ByteLevel", "add_prefix_space": false)",
                           R"({"type": "Split", "behavior": "Isolated", "add_prefix_space": false)")) ==
        "tokenizer.json: pre_tokenizer: missing \"pattern\"");
  CHECK(load_error(replace(base, R"("vocab": {"a": 0)", R"("vocab": {"a": -1)")) ==
        "tokenizer.json: model.vocab: \"a\": expected a non-negative integer id");
  CHECK(load_error("{\"model\": \n [1,}").find("tokenizer.json: invalid JSON at line 2, column") == 0);
  CHECK_THROWS_WITH(Tokenizer::from_file("/nonexistent/tokenizer.json"),
                    doctest::Contains("/nonexistent/tokenizer.json: no such file"));
}

TEST_CASE("fuzz regression (fuzz_tokenizer_json): a number beyond a double's range is refused naming the file") {
  // simdjson refuses it and nlohmann, asked where the error is, threw out_of_range instead of parse_error.
  std::string json = tokenizer_json("");
  json.replace(json.find(R"("vocab": {"a": 0)"), 16, R"("vocab": {"a": 1e30830)");
  CHECK(load_error(json) == "tokenizer.json: invalid JSON: [json.exception.out_of_range.406] number overflow parsing '1e30830'");
}
