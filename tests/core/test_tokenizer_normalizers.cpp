// Each normalizer and pre-tokenizer on a small input, with the exact pieces the crate gives (most cases
// are the crate's own unit tests).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/json_node.h"
#include "json_snippet.h"
#include "tokenizer/normalizers/normalizer.h"
#include "tokenizer/pre_tokenizers/pre_tokenizer.h"

using namespace probekit::tokenizer;

namespace {

std::string normalize(const std::string& json, std::string text) {
  JsonSnippet snippet(json);
  make_normalizer(*snippet.root)->normalize(text);
  return text;
}

// The piece texts a pre-tokenizer makes of `text` (one piece starting the input).
std::vector<std::string> pre_tokenize(const std::string& json, const std::string& text) {
  JsonSnippet snippet(json);
  std::vector<Piece> pieces{{text, -1, true}};
  make_pre_tokenizer(*snippet.root)->pre_tokenize(pieces);
  std::vector<std::string> texts;
  for (const Piece& piece : pieces) texts.push_back(piece.text);
  return texts;
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("normalizers: Unicode forms, Lowercase, StripAccents, Nmt") {
  CHECK(normalize(R"({"type": "NFC"})", "e\u0301t\u00e9") == "\u00e9t\u00e9");
  CHECK(normalize(R"({"type": "NFD"})", "\u00e9") == "e\u0301");
  CHECK(normalize(R"({"type": "NFKC"})", "\ufb01 \u2460 \uff26") == "fi 1 F");
  CHECK(normalize(R"({"type": "NFKD"})", "\ufb01\u00e9") == "fie\u0301");
  CHECK(normalize(R"({"type": "NFC"})", "plain ascii") == "plain ascii");
  // U+0130 lowercases to two code points, as Rust's char::to_lowercase does.
  CHECK(normalize(R"({"type": "Lowercase"})", "HeLLo \u0130STANBUL \u00c9") == "hello i\u0307stanbul \u00e9");
  CHECK(normalize(R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})",
                  "caf\u00e9 na\u00efve") == "cafe naive");
  CHECK(normalize(R"({"type": "Nmt"})", "a\x01" "b\tc\u200bd") == "ab c d");
}

TEST_CASE("normalizers: Replace with a string and a regex, Prepend, Strip, ByteLevel") {
  CHECK(normalize(R"({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"})", "a b  c") ==
        "a\u2581b\u2581\u2581c");
  CHECK(normalize(R"({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "})", "a  b   c d") == "a b c d");
  CHECK(normalize(R"({"type": "Replace", "pattern": {"String": "x"}, "content": ""})", "xaxbx") == "ab");
  CHECK(normalize(R"({"type": "Prepend", "prepend": "\u2581"})", "hi") == "\u2581hi");
  CHECK(normalize(R"({"type": "Prepend", "prepend": "\u2581"})", "").empty());  // nothing to prepend to
  CHECK(normalize(R"({"type": "Strip", "strip_left": true, "strip_right": true})", " \u3000hi there \t") == "hi there");
  CHECK(normalize(R"({"type": "Strip", "strip_left": true, "strip_right": false})", "  hi \t") == "hi \t");
  CHECK(normalize(R"({"type": "Strip", "strip_left": false, "strip_right": true})", "  hi \t") == "  hi");
  CHECK(normalize(R"({"type": "ByteLevel"})", "a b\n\u00e9") == "a\u0120b\u010a\u00c3\u00a9");
  // Llama 2's sequence.
  CHECK(normalize(R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})",
                  "Hello world") == "\u2581Hello\u2581world");
}

TEST_CASE("pre-tokenizer Split: every behavior, inverted, on a regex") {
  const std::string words = R"("pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "invert": true)";
  auto split = [&](const char* behavior) {
    return pre_tokenize(std::string(R"({"type": "Split", "behavior": ")") + behavior + "\", " + words + "}",
                        "How are you doing?");
  };
  CHECK(split("Removed") == Pieces{"How", "are", "you", "doing", "?"});
  CHECK(split("Isolated") == Pieces{"How", " ", "are", " ", "you", " ", "doing", "?"});
  CHECK(split("MergedWithPrevious") == Pieces{"How ", "are ", "you ", "doing", "?"});
  CHECK(split("MergedWithNext") == Pieces{"How", " are", " you", " doing", "?"});
  CHECK(split("Contiguous") == Pieces{"How", " ", "are", " ", "you", " ", "doing?"});
}

TEST_CASE("pre-tokenizer Split: every behavior on a string delimiter") {
  auto split = [](const char* behavior) {
    return pre_tokenize(std::string(R"({"type": "Split", "pattern": {"String": "-"}, "invert": false, "behavior": ")") +
                            behavior + "\"}",
                        "the-final--countdown");
  };
  CHECK(split("Removed") == Pieces{"the", "final", "countdown"});
  CHECK(split("Isolated") == Pieces{"the", "-", "final", "-", "-", "countdown"});
  CHECK(split("MergedWithPrevious") == Pieces{"the-", "final-", "-", "countdown"});
  CHECK(split("MergedWithNext") == Pieces{"the", "-final", "-", "-countdown"});
  CHECK(split("Contiguous") == Pieces{"the", "-", "final", "--", "countdown"});
  // Inverting a split on the words keeps the words, as a split on the spaces does.
  CHECK(pre_tokenize(R"({"type": "Split", "pattern": {"String": "Hello"}, "behavior": "Removed", "invert": true})",
                     "Hello Hello Hello") == Pieces{"Hello", "Hello", "Hello"});
  // Gemma's split on spaces leaves a text without spaces whole.
  CHECK(pre_tokenize(R"({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false})",
                     "a\u2581b") == Pieces{"a\u2581b"});
}

TEST_CASE("pre-tokenizer Split: the Llama 3 regex, and empty regex matches as Oniguruma reports them") {
  const char* llama3 =
      R"({"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}})";
  CHECK(pre_tokenize(llama3, "I'M 12345 ok!!\n\n  x") ==
        Pieces{"I", "'M", " ", "123", "45", " ok", "!!\n\n", " ", " x"});
  // `a*` matches empty between characters but not right after a match: [0,0) "b" [1,2)="aa"... as onig.
  CHECK(pre_tokenize(R"({"type": "Split", "pattern": {"Regex": "a*"}, "behavior": "Isolated", "invert": false})",
                     "baac") == Pieces{"b", "aa", "c"});
}

TEST_CASE("pre-tokenizer Split: \\s, \\w and \\h mean what they mean in Oniguruma") {
  auto split = [](const std::string& regex, const std::string& text) {
    return pre_tokenize(R"({"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex": ")" + regex +
                            "\"}}",
                        text);
  };
  // U+180E (Mongolian vowel separator) is no longer White_Space: PCRE2's \s takes it, Oniguruma's does not.
  CHECK(split(R"( ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+| ?\\p{L}+)", "x \u180e's") == Pieces{"x", " \u180e'", "s"});
  CHECK(split(R"(\\s+)", "a\u3000\u00a0b\u200bc") == Pieces{"a", "\u3000\u00a0", "b\u200bc"});
  // \w: letters, marks, decimal digits, connectors; not other numbers such as ².
  CHECK(split(R"(\\w+)", "e\u0301x\u00b2y_1") == Pieces{"e\u0301x", "\u00b2", "y_1"});
  CHECK(split(R"([\\w]+)", "e\u0301x\u00b2y") == Pieces{"e\u0301x", "\u00b2", "y"});
  // \h is a hex digit in Ruby syntax.
  CHECK(split(R"(\\h+)", "zz0fA q") == Pieces{"zz", "0fA", " q"});
  // \uHHHH is a code point; \v the vertical tab alone, not a line feed.
  CHECK(split(R"(\\u00e9+)", "caf\u00e9\u00e9s") == Pieces{"caf", "\u00e9\u00e9", "s"});
  CHECK(split(R"([\\u0041-\\u0043]+)", "xABCy") == Pieces{"x", "ABC", "y"});
  CHECK(split(R"(\\v)", "a\vb\nc") == Pieces{"a", "\v", "b\nc"});
  // Escaped backslashes, quoted literals and classes starting with ']' are left alone.
  CHECK(split(R"(\\\\s|[]s]+)", "a\\sb]sc") == Pieces{"a", "\\s", "b", "]s", "c"});
  CHECK(split(R"(\\Q\\s\\E)", "a\\sb") == Pieces{"a", "\\s", "b"});
}

TEST_CASE("pre-tokenizer ByteLevel: GPT-2 regex, prefix space, byte mapping") {
  CHECK(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})",
                     "Hello my friend, how is your day going?") ==
        Pieces{"Hello", "\u0120my", "\u0120friend", ",", "\u0120how", "\u0120is", "\u0120your", "\u0120day",
               "\u0120going", "?"});
  CHECK(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hello  there\n") ==
        Pieces{"\u0120Hello", "\u0120", "\u0120there", "\u010a"});
  CHECK(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "a b\u00e9") ==
        Pieces{"a\u0120b\u00c3\u00a9"});
}

TEST_CASE("pre-tokenizer Metaspace: replacement, prepend schemes, split") {
  const char* always = R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true})";
  CHECK(pre_tokenize(always, "Hey friend!") == Pieces{"\u2581Hey", "\u2581friend!"});
  CHECK(pre_tokenize(always, "Hey   friend!") == Pieces{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"});
  CHECK(pre_tokenize(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": false})",
                     "Hey friend") == Pieces{"Hey\u2581friend"});
  // "first": only the piece that starts the input gets the ▁ (the crate's non_legacy_meta_space test).
  const char* first = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": "<s>"}, "behavior": "Isolated", "invert": false},
      {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}]})";
  CHECK(pre_tokenize(first, "Hey my friend <s>how\u2581are you") ==
        Pieces{"\u2581Hey\u2581my\u2581friend\u2581", "<s>", "how\u2581are\u2581you"});
  CHECK(pre_tokenize(first, " Hey <s>how") == Pieces{"\u2581Hey\u2581", "<s>", "how"});
  // The legacy add_prefix_space: true means "always"; false must come with "never".
  CHECK(pre_tokenize(R"({"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": true})", "a b") ==
        Pieces{"\u2581a", "\u2581b"});
  CHECK_THROWS_WITH(pre_tokenize(R"({"type": "Metaspace", "replacement": "_", "add_prefix_space": false})", "a"),
                    doctest::Contains("add_prefix_space false does not match prepend_scheme"));
}

TEST_CASE("pre-tokenizers on character classes: Whitespace, WhitespaceSplit, Punctuation, Digits, BERT") {
  CHECK(pre_tokenize(R"({"type": "Whitespace"})", "Hey man!") == Pieces{"Hey", "man", "!"});
  CHECK(pre_tokenize(R"({"type": "Whitespace"})", "How are you doing?") == Pieces{"How", "are", "you", "doing", "?"});
  CHECK(pre_tokenize(R"({"type": "Whitespace"})", "\n").empty());
  CHECK(pre_tokenize(R"({"type": "WhitespaceSplit"})", "Hey, man, Good?") == Pieces{"Hey,", "man,", "Good?"});
  CHECK(pre_tokenize(R"({"type": "Punctuation"})", "Hey friend!     How are you?!?") ==
        Pieces{"Hey friend", "!", "     How are you", "?", "!", "?"});
  CHECK(pre_tokenize(R"({"type": "Punctuation", "behavior": "Contiguous"})", "Hey friend!     How are you?!?") ==
        Pieces{"Hey friend", "!", "     How are you", "?!?"});
  CHECK(pre_tokenize(R"({"type": "Digits", "individual_digits": true})", "Hey 123 friend!") ==
        Pieces{"Hey ", "1", "2", "3", " friend!"});
  CHECK(pre_tokenize(R"({"type": "Digits", "individual_digits": false})", "Hey 123 friend!") ==
        Pieces{"Hey ", "123", " friend!"});
  CHECK(pre_tokenize(R"({"type": "CharDelimiterSplit", "delimiter": "x"})", "axbxxc") == Pieces{"a", "b", "c"});
  CHECK(pre_tokenize(R"({"type": "BertPreTokenizer"})", "Hey friend!  How?") == Pieces{"Hey", "friend", "!", "How", "?"});
  CHECK(pre_tokenize(R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                        {"type": "Digits", "individual_digits": true}]})",
                     "a12 b3") == Pieces{"a", "1", "2", "b", "3"});
}
