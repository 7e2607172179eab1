// Normalizers that map code points through Unicode tables (utf8proc): the four normalization forms,
// Lowercase, StripAccents and Nmt.
#pragma once

#include "tokenizer/normalizers/normalizer.h"

namespace probekit::tokenizer {

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };

/// Unicode normalization to one of the four forms.
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(std::string& text) const override;

 private:
  UnicodeForm form_;
};

/// Full lowercase mapping per code point, as Rust's char::to_lowercase (U+0130 becomes "i\u0307").
class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

/// Removes combining marks (general category M).
class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

/// SentencePiece's NMT rule: drops control characters and turns other separators into spaces.
class NmtNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

}  // namespace probekit::tokenizer
