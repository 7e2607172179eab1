// Normalizers that edit the text as a string: Replace, Prepend and Strip.
#pragma once

#include <string>

#include "tokenizer/normalizers/normalizer.h"
#include "tokenizer/regex.h"

namespace probekit::tokenizer {

/// Replaces every match of a pattern with `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override;

 private:
  Pattern pattern_;
  std::string content_;
};

/// Puts `prefix` in front of the text, unless the text is empty.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override;

 private:
  std::string prefix_;
};

/// Removes leading and/or trailing whitespace (Unicode White_Space).
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override;

 private:
  bool left_, right_;
};

}  // namespace probekit::tokenizer
