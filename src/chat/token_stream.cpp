#include "chat/token_stream.h"

#include <fmt/format.h>

#include "chat/render_budget.h"
#include "chat/template_error.h"

namespace probekit::chat {

Token TokenStream::next() {
  Token token = tokens_[position_];
  if (position_ + 1 < tokens_.size()) position_++;
  return token;
}

bool TokenStream::at(TokenType type, std::string_view value) const {
  return current().type == type && (value.empty() || current().value == value);
}

bool TokenStream::skip_if(TokenType type, std::string_view value) {
  if (!at(type, value)) return false;
  next();
  return true;
}

Token TokenStream::expect(TokenType type, std::string_view value, std::string_view what) {
  if (!at(type, value)) fail("expected token '" + std::string(what) + "', got '" + describe_token(current()) + "'");
  return next();
}

void TokenStream::fail(const std::string& message) const { throw TemplateError(message, current().line); }

void TokenStream::check_chain(int length) const {
  if (depth_ + length > kMaxTemplateNesting) {
    fail(fmt::format("the template nests expressions and blocks deeper than {} levels", kMaxTemplateNesting));
  }
}

TokenStream::Nesting::Nesting(TokenStream& stream) : stream_(stream) {
  stream_.check_chain(1);
  stream_.depth_++;
}

}  // namespace probekit::chat
