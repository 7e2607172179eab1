#include "tokenizer/pre_tokenizers/split_pre_tokenizer.h"

namespace probekit::tokenizer {

void SplitPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  thread_local std::vector<Span> matches, spans;
  split_pieces(pieces, [&](Piece& piece, std::vector<Piece>& out) {
    matches.clear();
    spans.clear();
    pattern_.find_all(piece.text, matches);
    split_at_matches(piece.text, matches, behavior_, invert_, spans);
    if (spans.size() == 1 && spans[0].start == 0 && spans[0].end == piece.text.size()) {
      out.push_back(std::move(piece));  // nothing to cut: keep the string
    } else {
      append_sub_pieces(piece, spans, out);
    }
  });
}

SplitBehavior read_split_behavior(const JsonNode& node) {
  SplitBehavior behavior;
  std::string_view name = node.as_string();
  if (!parse_split_behavior(name, behavior)) {
    node.fail("unknown behavior \"{}\" (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)",
              name);
  }
  return behavior;
}

}  // namespace probekit::tokenizer
