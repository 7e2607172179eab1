// The parser's view of the tokens: the current one, a look at the next, and expectations that fail naming
// the line and what was found instead.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/lexer.h"

namespace probekit::chat {

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& current() const { return tokens_[position_]; }
  /// The token after the current one (the last one at the end).
  const Token& peek() const { return tokens_[position_ + 1 < tokens_.size() ? position_ + 1 : position_]; }
  /// Returns the current token and moves past it.
  Token next();
  /// True when the current token has `type` (and `value`, when given).
  bool at(TokenType type, std::string_view value = {}) const;
  /// True when the current token is the name `name` (a keyword such as `in`, `if`, `endfor`).
  bool at_name(std::string_view name) const { return at(TokenType::name, name); }
  /// Moves past the current token when it matches; says whether it did.
  bool skip_if(TokenType type, std::string_view value = {});
  /// The current token, which must match; otherwise fails "expected token 'what', got '...'".
  Token expect(TokenType type, std::string_view value, std::string_view what);
  /// Fails at the current token's line.
  [[noreturn]] void fail(const std::string& message) const;

  /// One level of the grammar's nesting (a block inside a block, an operand inside an expression) while it
  /// lives: the parsers recurse, so nesting is bounded (kMaxTemplateNesting) and fails naming the line.
  /// A left-deep chain (`a + b + c`, `x.a.b`, `x|f|g`) as long as `length` links nests that many levels below the
  /// current depth without recursing: fails past the bound as Nesting does.
  void check_chain(int length) const;

  class Nesting {
   public:
    explicit Nesting(TokenStream& stream);
    ~Nesting() { stream_.depth_--; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    TokenStream& stream_;
  };

 private:
  std::vector<Token> tokens_;
  size_t position_ = 0;
  int depth_ = 0;
};

}  // namespace probekit::chat
