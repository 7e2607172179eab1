#include "tokenizer/regex.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace probekit::tokenizer {
namespace {

// Match data, match context and JIT stack are per thread: batch encoding runs on OpenMP threads that share
// one compiled pattern. The larger JIT stack lets `\s+(?!\S)` run over long whitespace runs.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);

  MatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

// Oniguruma's (Ruby syntax) meaning of the escapes where PCRE2 differs, as class contents: \s is White_Space
// (PCRE2 adds U+180E), \w is letters, marks, decimal digits and connectors (PCRE2 takes all numbers and no
// marks), \h is a hex digit (PCRE2: horizontal space).
constexpr const char* kSpaceClass = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr const char* kWordClass = R"(\p{L}\p{M}\p{Nd}\p{Pc})";
constexpr const char* kHexClass = "0-9a-fA-F";

// Rewrites \s, \S, \w, \W, \h and \H with Oniguruma's classes. Inside a character class only the positive
// ones can be spelled out; a negated one there keeps PCRE2's meaning. Oniguruma's \uHHHH (PCRE2 has no \u) becomes
// \x{HHHH}, and its \v, the vertical tab alone (PCRE2: every vertical space), \x{0B}.
std::string translate_oniguruma(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); i++) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char next = pattern[++i];
      if (next == 'Q') {  // a quoted literal runs to \E untouched
        size_t end = pattern.find("\\E", i);
        end = end == std::string::npos ? pattern.size() : end + 2;
        out.append("\\").append(pattern, i, end - i);
        i = end - 1;
        continue;
      }
      if (next == 'u' && i + 4 < pattern.size() &&
          std::all_of(pattern.begin() + static_cast<std::ptrdiff_t>(i) + 1, pattern.begin() + static_cast<std::ptrdiff_t>(i) + 5,
                      [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; })) {
        out.append("\\x{").append(pattern, i + 1, 4).append("}");
        i += 4;
        continue;
      }
      if (next == 'v') {
        out.append("\\x{0B}");
        continue;
      }
      const char* contents = next == 's' || next == 'S' ? kSpaceClass
                             : next == 'w' || next == 'W' ? kWordClass
                             : next == 'h' || next == 'H' ? kHexClass
                                                          : nullptr;
      bool negated = next == 'S' || next == 'W' || next == 'H';
      if (contents != nullptr && !in_class) {
        out.append(negated ? "[^" : "[").append(contents).append("]");
      } else if (contents != nullptr && !negated) {
        out.append(contents);
      } else {
        out.push_back(c);
        out.push_back(next);
      }
      continue;
    }
    out.push_back(c);
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string::npos) {
        out.append(pattern, i + 1, end + 2 - (i + 1));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Oniguruma's lines end at \n only
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  std::string translated = translate_oniguruma(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &error_offset, context);
  pcre2_compile_context_free(context);
  if (code_ == nullptr) {
    fail("cannot compile regex \"{}\" (as PCRE2 \"{}\"): {} at offset {}", pattern, translated,
         pcre2_message(error), error_offset);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view text, std::vector<Span>& matches) const {
  MatchState& state = match_state();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool matched_before = false;
  size_t previous_end = 0;
  while (search_from <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), search_from, 0, state.data, state.context)
                  : pcre2_match(code_, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, state.data,
                                state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex \"{}\" failed: {}", pattern_, pcre2_message(rc));
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t start = ovector[0], end = ovector[1];
    if (start == end && matched_before && previous_end == end) {
      search_from += search_from < text.size() ? utf8_sequence_length(text[search_from]) : 1;
      continue;
    }
    matches.push_back({start, end});
    matched_before = true;
    previous_end = end;
    search_from = end;
  }
}

Pattern Pattern::literal(std::string text) {
  Pattern pattern;
  // The crate escapes the literal into a regex; an empty one then matches between every two characters.
  if (text.empty()) pattern.regex_ = std::make_shared<const Regex>("");
  pattern.literal_ = std::move(text);
  return pattern;
}

Pattern Pattern::regex(const std::string& pattern) {
  Pattern result;
  result.regex_ = std::make_shared<const Regex>(pattern);
  return result;
}

void Pattern::find_all(std::string_view text, std::vector<Span>& matches) const {
  if (regex_) {
    regex_->find_all(text, matches);
    return;
  }
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    matches.push_back({pos, pos + literal_.size()});
    pos += literal_.size();
  }
}

void Pattern::replace_all(std::string& text, const std::string& content, std::vector<Span>& matches) const {
  matches.clear();
  find_all(text, matches);
  if (matches.empty()) return;
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t previous = 0;
  for (const Span& match : matches) {
    out.append(text, previous, match.start - previous);
    out.append(content);
    previous = match.end;
  }
  out.append(text, previous, std::string::npos);
  text.swap(out);
}

}  // namespace probekit::tokenizer
