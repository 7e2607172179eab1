// Each decoder and post-processor with the exact output the crate gives (most cases are its own tests).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/decoders/decoder.h"
#include "tokenizer/json_node.h"
#include "json_snippet.h"
#include "tokenizer/processors/post_processor.h"

using namespace probekit::tokenizer;

namespace {

using Tokens = std::vector<std::string>;
using Ids = std::vector<int32_t>;

Tokens decode_chain(const std::string& json, Tokens tokens) {
  JsonSnippet snippet(json);
  make_decoder(*snippet.root)->decode_chain(tokens);
  return tokens;
}

Ids process(const std::string& json, const Ids& first, const Ids* second, bool add_special_tokens) {
  JsonSnippet snippet(json);
  return post_process(make_post_processor(*snippet.root).get(), first, second, add_special_tokens);
}

}  // namespace

TEST_CASE("decoder ByteFallback: byte runs become text, invalid bytes one U+FFFD each") {
  const char* byte_fallback = R"({"type": "ByteFallback"})";
  CHECK(decode_chain(byte_fallback, {"Hey", "friend!"}) == Tokens{"Hey", "friend!"});
  CHECK(decode_chain(byte_fallback, {"<0x61>"}) == Tokens{"a"});
  CHECK(decode_chain(byte_fallback, {"<0xE5>", "<0x8F>", "<0xAB>"}) == Tokens{"\u53eb"});
  CHECK(decode_chain(byte_fallback, {"<0xE5>", "<0x8F>", "<0xAB>", "a"}) == Tokens{"\u53eb", "a"});
  CHECK(decode_chain(byte_fallback, {"<0xE5>", "<0x8F>", "a"}) == Tokens{"\ufffd", "\ufffd", "a"});
  CHECK(decode_chain(byte_fallback, {"<0xFF>"}) == Tokens{"\ufffd"});
  CHECK(decode_chain(byte_fallback, {"<0xZZ>", "<0x6>"}) == Tokens{"<0xZZ>", "<0x6>"});  // not byte tokens
}

TEST_CASE("decoders Fuse, Strip, Replace, Metaspace, WordPiece, BPEDecoder") {
  CHECK(decode_chain(R"({"type": "Fuse"})", {"Hey", " friend!"}) == Tokens{"Hey friend!"});
  CHECK(decode_chain(R"({"type": "Strip", "content": "H", "start": 1, "stop": 0})", {"Hey", " friend!", "HHH"}) ==
        Tokens{"ey", " friend!", "HH"});
  CHECK(decode_chain(R"({"type": "Strip", "content": "y", "start": 0, "stop": 1})", {"Hey", " friend!"}) ==
        Tokens{"He", " friend!"});
  CHECK(decode_chain(R"({"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "})",
                     {"\u2581Hey", "\u2581friend!"}) == Tokens{" Hey", " friend!"});
  CHECK(decode_chain(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"})",
                     {"\u2581Hey", "\u2581friend!"}) == Tokens{"Hey", " friend!"});
  CHECK(decode_chain(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never"})",
                     {"\u2581Hey", "\u2581friend!"}) == Tokens{" Hey", " friend!"});
  Tokens wordpiece = decode_chain(R"({"type": "WordPiece", "prefix": "##", "cleanup": false})",
                                  {"##uelo", "Ara", "##\u00faj", "##o", "No", "##guera"});
  CHECK(wordpiece == Tokens{"##uelo", " Ara", "\u00faj", "o", " No", "guera"});
  CHECK(decode_chain(R"({"type": "BPEDecoder", "suffix": "</w>"})", {"My</w>", "na", "me</w>"}) ==
        Tokens{"My ", "na", "me"});
  // Rust's str::replace with an empty pattern puts the replacement around every character.
  CHECK(decode_chain(R"({"type": "BPEDecoder", "suffix": ""})", {"ab", "c"}) == Tokens{" a b ", "c"});
}

TEST_CASE("decoder ByteLevel: characters back to bytes, lossy UTF-8") {
  const char* byte_level = R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})";
  CHECK(decode_chain(byte_level, {"Hello", "\u0120my", "\u0120friend", "\u010a"}) == Tokens{"Hello my friend\n"});
  CHECK(decode_chain(byte_level, {"\u00c3\u00a9", "\u00c3"}) == Tokens{"\u00e9\ufffd"});
  // A token with a character outside the byte alphabet keeps its own bytes.
  CHECK(decode_chain(byte_level, {"a", "<|im_end|>\u4e2d"}) == Tokens{"a<|im_end|>\u4e2d"});
}

TEST_CASE("decoder Sequence: Llama 2's Replace, ByteFallback, Fuse, Strip") {
  const char* llama2 = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  CHECK(decode_chain(llama2, {"\u2581Hey", "\u2581", "<0xE5>", "<0x8F>", "<0xAB>", "!"}) == Tokens{"Hey \u53eb!"});
}

TEST_CASE("post-processor TemplateProcessing: single and pair templates, with and without special tokens") {
  const char* bert_template = R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
      "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                         "[SEP]": {"id": "[SEP]", "ids": [0], "tokens": ["[SEP]"]}}})";
  Ids pair_b{7, 8};
  CHECK(process(bert_template, {5, 6}, nullptr, true) == Ids{1, 5, 6, 0});
  CHECK(process(bert_template, {5, 6}, &pair_b, true) == Ids{1, 5, 6, 0, 7, 8, 0});
  CHECK(process(bert_template, {5, 6}, &pair_b, false) == Ids{5, 6, 7, 8});
  // A special token may stand for several ids.
  const char* multi = R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}},
      {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"X": {"id": "X", "ids": [3, 4], "tokens": ["a", "b"]}}})";
  CHECK(process(multi, {9}, nullptr, true) == Ids{3, 4, 9});
  CHECK_THROWS_WITH(process(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "Y", "type_id": 0}}],
                                "pair": [], "special_tokens": {}})", {1}, nullptr, true),
                    doctest::Contains("template uses special token \"Y\" missing from special_tokens"));
}

TEST_CASE("post-processors Bert, Roberta, ByteLevel and Sequence") {
  Ids pair_b{7};
  const char* bert = R"({"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]})";
  CHECK(process(bert, {5}, nullptr, true) == Ids{101, 5, 102});
  CHECK(process(bert, {5}, &pair_b, true) == Ids{101, 5, 102, 7, 102});
  CHECK(process(bert, {5}, nullptr, false) == Ids{5});
  const char* roberta = R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                           "trim_offsets": true, "add_prefix_space": true})";
  CHECK(process(roberta, {5}, &pair_b, true) == Ids{0, 5, 2, 2, 7, 2});
  CHECK(process(R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false})", {5}, nullptr, true) == Ids{5});
  CHECK(process(std::string(R"({"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": false}, )") +
                    bert + "]}",
                {5}, nullptr, true) == Ids{101, 5, 102});
}
