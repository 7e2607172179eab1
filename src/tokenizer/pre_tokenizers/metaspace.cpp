#include "tokenizer/pre_tokenizers/metaspace.h"

#include "tokenizer/utf8.h"

namespace probekit::tokenizer {

MetaspacePreTokenizer::MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
    : scheme_(scheme), split_(split) {
  append_utf8(replacement_, replacement);
}

void MetaspacePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  thread_local std::vector<Span> matches, spans;
  split_pieces(pieces, [&](Piece& piece, std::vector<Piece>& out) {
    std::string text;
    text.reserve(piece.text.size() + 8);
    for (char c : piece.text) {
      if (c == ' ') {
        text.append(replacement_);
      } else {
        text.push_back(c);
      }
    }
    bool starts_with_replacement = text.compare(0, replacement_.size(), replacement_) == 0;
    bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_input_start);
    if (prepend && !starts_with_replacement && !text.empty()) text.insert(0, replacement_);
    piece.text.swap(text);
    if (!split_) {
      out.push_back(std::move(piece));
      return;
    }
    matches.clear();
    spans.clear();
    size_t pos = 0;
    while ((pos = piece.text.find(replacement_, pos)) != std::string::npos) {
      matches.push_back({pos, pos + replacement_.size()});
      pos += replacement_.size();
    }
    split_at_matches(piece.text, matches, SplitBehavior::kMergedWithNext, false, spans);
    append_sub_pieces(piece, spans, out);
  });
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); i++) {
    // The crate drops every ▁ of the first token, not only a leading one.
    bool drop = i == 0 && scheme_ != PrependScheme::kNever;
    std::string out;
    size_t pos = 0;
    while (pos < tokens[i].size()) {
      size_t start = pos;
      char32_t cp = next_code_point(tokens[i], pos);
      if (cp != replacement_) {
        out.append(tokens[i], start, pos - start);
      } else if (!drop) {
        out.push_back(' ');
      }
    }
    tokens[i].swap(out);
  }
}

std::string MetaspaceDecoder::token_bytes(std::string token) const {
  std::string out;
  size_t pos = 0;
  while (pos < token.size()) {
    size_t start = pos;
    char32_t cp = next_code_point(token, pos);
    if (cp == replacement_) {
      out.push_back(' ');
    } else {
      out.append(token, start, pos - start);
    }
  }
  return out;
}

void read_metaspace(const JsonNode& node, char32_t& replacement, PrependScheme& scheme) {
  replacement = node.at("replacement").as_char();
  scheme = PrependScheme::kAlways;
  std::optional<JsonNode> scheme_node = node.find("prepend_scheme");
  if (scheme_node) {
    std::string_view name = scheme_node->as_string();
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      scheme_node->fail("unknown prepend_scheme \"{}\" (supported: always, first, never)", name);
    }
  }
  // The legacy add_prefix_space may only confirm the scheme; the crate rejects false with a scheme other
  // than "never", including the default "always" when prepend_scheme is missing.
  if (!node.bool_or("add_prefix_space", true) && scheme != PrependScheme::kNever) {
    node.fail("add_prefix_space false does not match prepend_scheme \"{}\"",
              scheme_node ? scheme_node->as_string() : "always");
  }
}

}  // namespace probekit::tokenizer
