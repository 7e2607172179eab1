#include "tokenizer/pre_tokenizers/char_pre_tokenizers.h"

#include "tokenizer/utf8.h"

namespace probekit::tokenizer {

void WhitespacePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  thread_local std::vector<Span> spans;
  split_pieces(pieces, [&](Piece& piece, std::vector<Piece>& out) {
    spans.clear();
    enum Kind { kSpace, kWord, kOther };
    Kind run_kind = kSpace;
    size_t run_start = 0, pos = 0;
    while (pos < piece.text.size()) {
      size_t start = pos;
      char32_t cp = next_code_point(piece.text, pos);
      Kind kind = is_word_char(cp) ? kWord : is_whitespace(cp) ? kSpace : kOther;
      if (kind != run_kind) {
        if (run_kind != kSpace) spans.push_back({run_start, start});
        run_kind = kind;
        run_start = start;
      }
    }
    if (run_kind != kSpace) spans.push_back({run_start, piece.text.size()});
    append_sub_pieces(piece, spans, out);
  });
}

bool CharClassPreTokenizer::matches(char32_t cp) const {
  switch (class_) {
    case CharClass::kWhitespace: return is_whitespace(cp);
    case CharClass::kPunctuation: return is_punctuation(cp);
    case CharClass::kNumeric: return is_numeric(cp);
    case CharClass::kDelimiter: return cp == delimiter_;
  }
  return false;
}

void CharClassPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  thread_local std::vector<Span> matched_chars, spans;
  split_pieces(pieces, [&](Piece& piece, std::vector<Piece>& out) {
    matched_chars.clear();
    spans.clear();
    size_t pos = 0;
    while (pos < piece.text.size()) {
      size_t start = pos;
      if (matches(next_code_point(piece.text, pos))) matched_chars.push_back({start, pos});
    }
    split_at_matches(piece.text, matched_chars, behavior_, false, spans);
    append_sub_pieces(piece, spans, out);
  });
}

void BertPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  whitespace_.pre_tokenize(pieces);
  punctuation_.pre_tokenize(pieces);
}

}  // namespace probekit::tokenizer
