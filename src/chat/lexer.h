// Cuts a template into text and the tokens inside its tags, as jinja2's lexer does in the environment
// transformers renders chat templates with: trim_blocks (the newline after a block or comment tag goes),
// lstrip_blocks (spaces and tabs before a block or comment tag on its own line go), `-` inside a tag's
// delimiter strips all whitespace on that side and `+` turns lstrip or trim off for that tag. As jinja2 does,
// line endings become "\n" and one newline at the very end of the template is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace probekit::chat {

enum class TokenType {
  text,            // template text outside the tags, whitespace control applied
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  string,          // its value, escapes decoded
  integer,
  floating,
  op,              // an operator or punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  end_of_template,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

/// The tokens of `source`, ending with end_of_template. A raw block's content is one text token. A tag left
/// open, an unterminated comment or string, or a character no token starts with fails naming the line.
std::vector<Token> tokenize(std::string_view source);

/// How jinja2 names a token in errors: "end of print statement", "string", a name or an operator as written.
std::string describe_token(const Token& token);

}  // namespace probekit::chat
