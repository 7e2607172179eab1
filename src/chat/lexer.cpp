#include "chat/lexer.h"

#include <cctype>

#include "chat/string_literal.h"
#include "chat/template_error.h"
#include "chat/unicode_text.h"

namespace probekit::chat {

namespace {

// Line endings as "\n", and one newline at the end dropped (jinja2's keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); i++) {
    if (source[i] != '\r') {
      out += source[i];
    } else {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') i++;
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_space_text(std::string_view text) {
  if (text.empty()) return false;
  for (char32_t cp : decode_utf8(text)) {
    if (!is_python_space(cp)) return false;
  }
  return true;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

constexpr const char* kTwoCharOperators[] = {"//", "**", "==", "!=", ">=", "<="};
constexpr std::string_view kOneCharOperators = "+-/*%~[](){}<>=.:|,;";

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < source_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(source_.substr(pos_), source_.size());
        break;
      }
      lex_tag_at(tag);
    }
    tokens_.push_back({TokenType::end_of_template, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t at = source_.find('{', from); at != std::string::npos; at = source_.find('{', at + 1)) {
      if (at + 1 < source_.size() && (source_[at + 1] == '{' || source_[at + 1] == '%' || source_[at + 1] == '#')) return at;
    }
    return std::string::npos;
  }

  // Moves to `to`, counting the lines passed.
  void advance(size_t to) {
    for (; pos_ < to; pos_++) line_ += source_[pos_] == '\n' ? 1 : 0;
  }

  void emit_text(std::string text, size_t end) {
    if (!text.empty()) tokens_.push_back({TokenType::text, std::move(text), line_});
    advance(end);
  }

  // The text before a tag, less what the tag's whitespace control removes: everything with `-`; with
  // lstrip_blocks, the spaces between the line's start and a block or comment tag alone on its line.
  std::string controlled_text(size_t tag, char sign, bool block_or_comment) const {
    std::string text = source_.substr(pos_, tag - pos_);
    if (sign == '-') return python_strip(text, std::nullopt, false, true);
    if (sign == '+' || !block_or_comment) return text;
    size_t line_start = text.rfind('\n');
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if ((line_start > 0 || line_starting_) && is_space_text(std::string_view(text).substr(line_start))) {
      text.resize(line_start);
    }
    return text;
  }

  void lex_tag_at(size_t tag) {
    char kind = source_[tag + 1];
    char sign = tag + 2 < source_.size() && (source_[tag + 2] == '-' || source_[tag + 2] == '+') ? source_[tag + 2] : 0;
    size_t raw_end = kind == '%' ? raw_begin_end(tag + 2 + (sign ? 1 : 0)) : 0;
    emit_text(controlled_text(tag, sign, kind != '{'), tag);
    advance(tag + 2 + (sign ? 1 : 0));
    if (kind == '#') return lex_comment();
    if (raw_end > 0) return lex_raw(raw_end);
    lex_inside_tag(kind == '{');
  }

  // After a block or comment tag: "+" keeps what follows, "-" strips all whitespace, else trim_blocks
  // drops one newline. Returns where the text goes on.
  size_t after_block_end(size_t delimiter_end, bool stripped, bool kept) const {
    size_t end = delimiter_end;
    if (stripped) {
      while (end < source_.size() && is_ascii_space(source_[end])) end++;
    } else if (!kept && end < source_.size() && source_[end] == '\n') {
      end++;
    }
    return end;
  }

  void finish_tag(size_t end) {
    advance(end);
    line_starting_ = end > 0 && source_[end - 1] == '\n';
  }

  void lex_comment() {
    size_t close = source_.find("#}", pos_);
    if (close == std::string::npos) fail_template(line_, "missing end of comment tag");
    bool stripped = close > pos_ && source_[close - 1] == '-';
    bool kept = close > pos_ && source_[close - 1] == '+';
    finish_tag(after_block_end(close + 2, stripped, kept));
  }

  // Where "{% raw %}" ends when the tag starting before `from` is one, else 0.
  size_t raw_begin_end(size_t from) const { return match_keyword_tag(from, "raw", false); }

  // Matches `\s*keyword\s*` then "-%}" or "%}" (and "+%}" when `plus_allowed`) from `from`; returns the end
  // of the match including what trim or strip removes after it, or 0.
  size_t match_keyword_tag(size_t from, std::string_view keyword, bool plus_allowed) const {
    size_t at = from;
    while (at < source_.size() && is_ascii_space(source_[at])) at++;
    if (source_.compare(at, keyword.size(), keyword) != 0) return 0;
    at += keyword.size();
    while (at < source_.size() && is_ascii_space(source_[at])) at++;
    char sign = at < source_.size() && (source_[at] == '-' || source_[at] == '+') ? source_[at] : 0;
    if (sign == '+' && !plus_allowed) return 0;
    if (source_.compare(at + (sign ? 1 : 0), 2, "%}") != 0) return 0;
    // "{% raw %}" itself keeps the newline after it; only "{% endraw %}" trims one (as jinja2's rules do).
    return after_block_end(at + (sign ? 3 : 2), sign == '-', sign == '+' || !plus_allowed);
  }

  void lex_raw(size_t content_start) {
    finish_tag(content_start);
    for (size_t tag = source_.find("{%", pos_); tag != std::string::npos; tag = source_.find("{%", tag + 2)) {
      char sign = tag + 2 < source_.size() && (source_[tag + 2] == '-' || source_[tag + 2] == '+') ? source_[tag + 2] : 0;
      size_t end = match_keyword_tag(tag + 2 + (sign ? 1 : 0), "endraw", true);
      if (end == 0) continue;
      emit_text(controlled_text(tag, sign, true), tag);
      finish_tag(end);
      return;
    }
    fail_template(line_, "Missing end of raw directive");
  }

  // At a tag's end (outside brackets): the end token, its whitespace control applied. False if not there.
  bool lex_tag_end(bool variable) {
    const char* close = variable ? "}}" : "%}";
    char sign = source_[pos_] == '-' || source_[pos_] == '+' ? source_[pos_] : 0;
    if (variable && sign == '+') sign = 0;
    if (source_.compare(pos_ + (sign ? 1 : 0), 2, close) != 0) return false;
    size_t delimiter_end = pos_ + (sign ? 3 : 2);
    size_t end = variable && sign != '-' ? delimiter_end : after_block_end(delimiter_end, sign == '-', sign == '+');
    tokens_.push_back({variable ? TokenType::variable_end : TokenType::block_end, close, line_});
    finish_tag(end);
    return true;
  }

  void lex_inside_tag(bool variable) {
    tokens_.push_back({variable ? TokenType::variable_begin : TokenType::block_begin, variable ? "{{" : "{%", line_});
    std::string brackets;
    while (true) {
      while (pos_ < source_.size() && is_ascii_space(source_[pos_])) advance(pos_ + 1);
      if (pos_ >= source_.size()) {
        fail_template(line_, "unexpected end of template, expected '{}'.",
                      variable ? "end of print statement" : "end of statement block");
      }
      if (brackets.empty() && lex_tag_end(variable)) return;
      lex_token(brackets);
    }
  }

  void lex_token(std::string& brackets) {
    char c = source_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < source_.size() && is_name_char(source_[end])) end++;
      return push(TokenType::name, source_.substr(pos_, end - pos_), end);
    }
    if (c == '\'' || c == '"') {
      size_t end = 0;
      std::string value = read_string_literal(source_, pos_, end);
      if (end == 0) fail_template(line_, "unexpected char '{}' at {}", c, pos_);
      return push(TokenType::string, std::move(value), end);
    }
    for (const char* op : kTwoCharOperators) {
      if (source_.compare(pos_, 2, op) == 0) return push(TokenType::op, op, pos_ + 2);
    }
    if (kOneCharOperators.find(c) == std::string_view::npos) fail_template(line_, "unexpected char '{}' at {}", c, pos_);
    track_bracket(c, brackets);
    push(TokenType::op, std::string(1, c), pos_ + 1);
  }

  void track_bracket(char c, std::string& brackets) {
    if (c == '(' || c == '[' || c == '{') {
      brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail_template(line_, "unexpected '{}'", c);
      if (brackets.back() != c) fail_template(line_, "unexpected '{}', expected '{}'", c, brackets.back());
      brackets.pop_back();
    }
  }

  // jinja2's 0b, 0o and 0x integers (either case), with an underscore allowed before each digit: "0x_1f". The
  // token keeps the prefix and drops the underscores; false when no digit follows the prefix.
  bool lex_prefixed_integer() {
    if (source_[pos_] != '0' || pos_ + 1 >= source_.size()) return false;
    char prefix = static_cast<char>(std::tolower(static_cast<unsigned char>(source_[pos_ + 1])));
    auto is_base_digit = [prefix](char c) {
      if (prefix == 'b') return c == '0' || c == '1';
      if (prefix == 'o') return c >= '0' && c <= '7';
      return std::isxdigit(static_cast<unsigned char>(c)) != 0;
    };
    if (prefix != 'b' && prefix != 'o' && prefix != 'x') return false;
    std::string text = {'0', prefix};
    size_t end = pos_ + 2;
    while (true) {
      size_t digit = end < source_.size() && source_[end] == '_' ? end + 1 : end;
      if (digit >= source_.size() || !is_base_digit(source_[digit])) break;
      text += source_[digit];
      end = digit + 1;
    }
    if (text.size() == 2) return false;
    push(TokenType::integer, text, end);
    return true;
  }

  // Digits with optional underscores; a fraction or an exponent makes a float (not right after a '.', so
  // that `messages.0.content` is two lookups).
  void lex_number() {
    if (lex_prefixed_integer()) return;
    auto digits_end = [&](size_t at) {
      while (at < source_.size() && (is_digit(source_[at]) || (source_[at] == '_' && at + 1 < source_.size() && is_digit(source_[at + 1])))) at++;
      return at;
    };
    size_t end = digits_end(pos_);
    bool after_dot = pos_ > 0 && source_[pos_ - 1] == '.';
    bool is_float = false;
    if (!after_dot && end + 1 < source_.size() && source_[end] == '.' && is_digit(source_[end + 1])) {
      end = digits_end(end + 1);
      is_float = true;
    }
    if (!after_dot && end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exponent = end + 1 + (end + 1 < source_.size() && (source_[end + 1] == '+' || source_[end + 1] == '-') ? 1 : 0);
      if (exponent < source_.size() && is_digit(source_[exponent])) end = digits_end(exponent), is_float = true;
    }
    if (!is_float && source_[pos_] == '0') {  // jinja2's decimal integers have no leading zeros: "007" is "00", "7"
      end = pos_;
      while (end < source_.size() && (source_[end] == '0' || (source_[end] == '_' && end + 1 < source_.size() && source_[end + 1] == '0'))) end++;
    }
    std::string text;
    for (size_t i = pos_; i < end; i++) {
      if (source_[i] != '_') text += source_[i];
    }
    push(is_float ? TokenType::floating : TokenType::integer, text, end);
  }

  void push(TokenType type, std::string value, size_t end) {
    tokens_.push_back({type, std::move(value), line_});
    advance(end);
  }

  std::string source_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // at the template's start or just after a newline a tag's end took
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe_token(const Token& token) {
  switch (token.type) {
    case TokenType::variable_begin:
      return "begin of print statement";
    case TokenType::variable_end:
      return "end of print statement";
    case TokenType::block_begin:
      return "begin of statement block";
    case TokenType::block_end:
      return "end of statement block";
    case TokenType::end_of_template:
      return "end of template";
    case TokenType::text:
      return "template data";
    case TokenType::string:
      return "string";
    case TokenType::integer:
      return "integer";
    case TokenType::floating:
      return "float";
    default:
      return token.value;
  }
}

}  // namespace probekit::chat
