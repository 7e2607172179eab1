// Regular expressions for the patterns in tokenizer.json. The crate compiles them with Oniguruma (Ruby
// syntax); PCRE2 with UTF + UCP understands the same constructs the published tokenizers use (\p{L}, \p{N},
// (?i:...), (?!\S)), ^/$ are line anchors in both once PCRE2_MULTILINE is set, and \s, \w, \h (which the
// two define differently) are spelled out as Oniguruma's classes before compiling. JIT-compiled for speed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace probekit::tokenizer {

/// A byte range [start, end) of a string.
struct Span {
  size_t start = 0;
  size_t end = 0;
};

class Regex {
 public:
  /// Compiles `pattern`; throws std::runtime_error with PCRE2's message and the offset of the error.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Appends every match in `text` (valid UTF-8) in order, with Oniguruma's find_iter rule for empty
  /// matches: one that ends where the previous match ended is skipped and the search moves on a character.
  void find_all(std::string_view text, std::vector<Span>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

/// What Split and Replace look for: a literal string or a regex ({"String": ...} or {"Regex": ...}).
class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(const std::string& pattern);

  /// Appends the matches in `text`, leftmost first and non-overlapping.
  void find_all(std::string_view text, std::vector<Span>& matches) const;

  /// Replaces every match in `text` with `content`; `matches` is scratch space a caller may reuse across calls.
  void replace_all(std::string& text, const std::string& content, std::vector<Span>& matches) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // set for regexes and for the empty literal
};

}  // namespace probekit::tokenizer
