#include "tokenizer/decoders/text_decoders.h"

#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" token, or -1. Like Rust's u8::from_str_radix, a "+" may stand before one digit.
int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int low = hex_value(token[4]);
  if (low < 0) return -1;
  if (token[3] == '+') return low;
  int high = hex_value(token[3]);
  return high < 0 ? -1 : high * 16 + low;
}

// Rust's str::replace, including its rule for an empty pattern: `to` before every character and at the end.
void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) {
    std::string out(to);
    for (size_t pos = 0; pos < text.size();) {
      size_t start = pos;
      next_code_point(text, pos);
      out.append(text, start, pos - start).append(to);
    }
    text.swap(out);
    return;
  }
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
}

}  // namespace

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<Span> matches;
  for (std::string& token : tokens) pattern_.replace_all(token, content_, matches);
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  std::string pending_bytes;
  auto flush = [&] {
    if (pending_bytes.empty()) return;
    if (is_valid_utf8(pending_bytes)) {
      out.push_back(pending_bytes);
    } else {
      for (size_t i = 0; i < pending_bytes.size(); i++) out.emplace_back("\xEF\xBF\xBD");
    }
    pending_bytes.clear();
  };
  for (std::string& token : tokens) {
    int byte = byte_token_value(token);
    if (byte >= 0) {
      pending_bytes.push_back(static_cast<char>(byte));
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  tokens.swap(out);
}

std::string ByteFallbackDecoder::token_bytes(std::string token) const {
  const int byte = byte_token_value(token);
  return byte >= 0 ? std::string(1, static_cast<char>(byte)) : token;
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const std::string& token : tokens) joined.append(token);
  tokens.assign(1, std::move(joined));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    std::vector<size_t> starts;  // byte offset of each character, then the end
    for (size_t pos = 0; pos < token.size();) {
      starts.push_back(pos);
      next_code_point(token, pos);
    }
    size_t count = starts.size();
    starts.push_back(token.size());
    auto char_at = [&](size_t i) {
      size_t pos = starts[i];
      return next_code_point(token, pos);
    };
    size_t begin = 0, end = count;
    for (size_t i = 0; i < start_ && i < count && char_at(i) == content_; i++) begin = i + 1;
    for (size_t i = 0; i < stop_ && i < count && char_at(count - 1 - i) == content_; i++) end = count - 1 - i;
    token = begin < end ? token.substr(starts[begin], starts[end] - starts[begin]) : std::string();
  }
}

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); i++) {
    std::string& token = tokens[i];
    if (i != 0) {
      if (token.compare(0, prefix_.size(), prefix_) == 0) {
        token.erase(0, prefix_.size());
      } else {
        token.insert(0, " ");
      }
    }
    if (cleanup_) {
      static const std::pair<std::string_view, std::string_view> kRules[] = {
          {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},
          {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
          {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
      for (const auto& [from, to] : kRules) replace_all(token, from, to);
    }
  }
}

void BpeDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); i++) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
}

}  // namespace probekit::tokenizer
