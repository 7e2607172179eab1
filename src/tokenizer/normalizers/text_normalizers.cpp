#include "tokenizer/normalizers/text_normalizers.h"

#include "tokenizer/utf8.h"

namespace probekit::tokenizer {

void ReplaceNormalizer::normalize(std::string& text) const {
  thread_local std::vector<Span> matches;
  pattern_.replace_all(text, content_, matches);
}

void PrependNormalizer::normalize(std::string& text) const {
  if (!text.empty()) text.insert(0, prefix_);
}

void StripNormalizer::normalize(std::string& text) const {
  size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      size_t next = begin;
      if (!is_whitespace(next_code_point(text, next))) break;
      begin = next;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t last = end - 1;
      while (last > begin && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) last--;
      size_t pos = last;
      if (!is_whitespace(next_code_point(text, pos))) break;
      end = last;
    }
  }
  text = text.substr(begin, end - begin);
}

}  // namespace probekit::tokenizer
