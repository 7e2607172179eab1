#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

// The printable bytes stand for themselves; the others get U+0100 onwards, in byte order.
struct ByteTables {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 0x144> char_to_byte;  // -1 where a code point is not in the mapping

  ByteTables() {
    char_to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int byte = 0; byte < 256; byte++) {
      bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
      char32_t cp = printable ? static_cast<char32_t>(byte) : next_extra++;
      append_utf8(byte_to_char[byte], cp);
      char_to_byte[cp] = static_cast<int16_t>(byte);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables instance;
  return instance;
}

const Regex& gpt2_regex() {
  static const Regex regex(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  return regex;
}

}  // namespace

void append_byte_level(std::string_view text, std::string& out) {
  const ByteTables& t = tables();
  for (char c : text) out.append(t.byte_to_char[static_cast<unsigned char>(c)]);
}

void ByteLevelNormalizer::normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size() * 2);
  append_byte_level(text, out);
  text.swap(out);
}

void ByteLevelPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  thread_local std::vector<Span> matches, spans;
  split_pieces(pieces, [&](Piece& piece, std::vector<Piece>& out) {
    // The crate adds the space to every piece, not only the first one of the text.
    if (add_prefix_space_ && !piece.text.empty() && piece.text[0] != ' ') piece.text.insert(0, " ");
    size_t first = out.size();
    if (use_regex_) {
      matches.clear();
      spans.clear();
      gpt2_regex().find_all(piece.text, matches);
      split_at_matches(piece.text, matches, SplitBehavior::kIsolated, false, spans);
      append_sub_pieces(piece, spans, out);
    } else {
      out.push_back(std::move(piece));
    }
    for (size_t i = first; i < out.size(); i++) {
      std::string mapped;
      mapped.reserve(out[i].text.size() * 2);
      append_byte_level(out[i].text, mapped);
      out[i].text.swap(mapped);
    }
  });
}

namespace {

// The bytes of one token's characters, or the token as it is when one of them is not a byte's character.
void append_token_bytes(const std::string& token, std::string& bytes) {
  const ByteTables& t = tables();
  const size_t token_start = bytes.size();
  size_t pos = 0;
  while (pos < token.size()) {
    char32_t cp = next_code_point(token, pos);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      bytes.resize(token_start);
      bytes.append(token);
      return;
    }
    bytes.push_back(static_cast<char>(t.char_to_byte[cp]));
  }
}

}  // namespace

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& token : tokens) append_token_bytes(token, bytes);
  tokens.assign(1, to_valid_utf8(bytes));
}

std::string ByteLevelDecoder::token_bytes(std::string token) const {
  std::string bytes;
  append_token_bytes(token, bytes);
  return bytes;
}

}  // namespace probekit::tokenizer
