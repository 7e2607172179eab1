#include "chat/expression_parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "chat/filters.h"
#include "chat/is_tests.h"

namespace probekit::chat {

namespace {

ExprPtr make(ExprKind kind, int line, std::string name = {}) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  expr->name = std::move(name);
  return expr;
}

ExprPtr make_binary(ExprKind kind, std::string op, ExprPtr left, ExprPtr right) {
  ExprPtr expr = make(kind, left->line, std::move(op));
  expr->items.push_back(std::move(left));
  expr->items.push_back(std::move(right));
  return expr;
}

ExprPtr literal(Value value, int line) {
  ExprPtr expr = make(ExprKind::literal, line);
  expr->value = std::move(value);
  return expr;
}

class ExpressionParser {
 public:
  explicit ExpressionParser(TokenStream& stream) : s_(stream) {}

  ExprPtr expression(bool with_conditional) { return with_conditional ? conditional() : logical_or(); }

  ExprPtr tuple(bool with_conditional, const std::vector<std::string>& end_names, bool in_parentheses) {
    int line = s_.current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) s_.expect(TokenType::op, ",", ",");
      if (tuple_ends(end_names)) break;
      items.push_back(expression(with_conditional));
      if (!s_.at(TokenType::op, ",")) break;
      is_tuple = true;
    }
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    if (!is_tuple && !in_parentheses) s_.fail("Expected an expression, got '" + describe_token(s_.current()) + "'");
    ExprPtr expr = make(ExprKind::tuple, line);
    expr->items = std::move(items);
    return expr;
  }

  // Filters applied to `operand` (null for a block's chain) as long as `|` follows.
  ExprPtr filters(ExprPtr operand, bool first_without_bar) {
    bool first = first_without_bar;
    for (int links = 1; first || s_.skip_if(TokenType::op, "|"); ++links) {
      s_.check_chain(links);
      first = false;
      operand = filter(std::move(operand));
    }
    return operand;
  }

 private:
  bool tuple_ends(const std::vector<std::string>& end_names) const {
    if (s_.at(TokenType::variable_end) || s_.at(TokenType::block_end) || s_.at(TokenType::op, ")")) return true;
    for (const std::string& name : end_names) {
      if (s_.at_name(name)) return true;
    }
    return false;
  }

  ExprPtr conditional() {
    TokenStream::Nesting nesting(s_);
    ExprPtr result = logical_or();
    for (int links = 1; s_.skip_if(TokenType::name, "if"); ++links) {
      s_.check_chain(links);
      ExprPtr condition = logical_or();
      ExprPtr otherwise = s_.skip_if(TokenType::name, "else") ? conditional() : nullptr;
      ExprPtr expr = make(ExprKind::conditional, result->line);
      expr->items.push_back(std::move(condition));
      expr->items.push_back(std::move(result));
      expr->items.push_back(std::move(otherwise));
      result = std::move(expr);
    }
    return result;
  }

  // One level of left-associative binary operators of `type` (op, or name for `and` / `or`), whose operands
  // the next level parses.
  ExprPtr binary_level(ExprPtr (ExpressionParser::*operand)(), std::initializer_list<const char*> ops,
                       TokenType type = TokenType::op) {
    ExprPtr left = (this->*operand)();
    for (int links = 1;; ++links) {
      const char* found = nullptr;
      for (const char* op : ops) found = found == nullptr && s_.at(type, op) ? op : found;
      if (found == nullptr) return left;
      s_.check_chain(links);  // the tree grows a level per operator: 1 + 1 + ... must not outgrow the stack
      s_.next();
      left = make_binary(ExprKind::binary, found, std::move(left), (this->*operand)());
    }
  }

  ExprPtr logical_or() { return binary_level(&ExpressionParser::logical_and, {"or"}, TokenType::name); }
  ExprPtr logical_and() { return binary_level(&ExpressionParser::logical_not, {"and"}, TokenType::name); }

  ExprPtr logical_not() {
    TokenStream::Nesting nesting(s_);
    if (!s_.at_name("not")) return comparison();
    ExprPtr expr = make(ExprKind::unary, s_.next().line, "not");
    expr->items.push_back(logical_not());
    return expr;
  }

  // The comparison operator at the current token ("not in" takes two), or "" when there is none.
  std::string comparison_operator() {
    static const char* ops[] = {"==", "!=", "<", "<=", ">", ">="};
    for (const char* op : ops) {
      if (s_.skip_if(TokenType::op, op)) return op;
    }
    if (s_.skip_if(TokenType::name, "in")) return "in";
    if (s_.at_name("not") && s_.peek().type == TokenType::name && s_.peek().value == "in") {
      s_.next();
      s_.next();
      return "not in";
    }
    return "";
  }

  ExprPtr comparison() {
    ExprPtr first = sum();
    ExprPtr expr;
    for (std::string op = comparison_operator(); !op.empty(); op = comparison_operator()) {
      if (!expr) {
        expr = make(ExprKind::compare, first->line);
        expr->items.push_back(std::move(first));
      }
      expr->operators.push_back(op);
      expr->items.push_back(sum());
    }
    return expr ? std::move(expr) : std::move(first);
  }

  // jinja2's precedence: + - bind looser than ~, which binds looser than * / // %, then **.
  ExprPtr sum() { return binary_level(&ExpressionParser::concatenation, {"+", "-"}); }
  ExprPtr concatenation() { return binary_level(&ExpressionParser::product, {"~"}); }
  ExprPtr product() { return binary_level(&ExpressionParser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return binary_level(&ExpressionParser::filtered_unary, {"**"}); }
  ExprPtr filtered_unary() { return unary(true); }

  // jinja2 applies a sign to the primary alone: `-x|abs` is abs(-x), `-2 ** 2` is 4.
  ExprPtr unary(bool with_filters) {
    TokenStream::Nesting nesting(s_);
    ExprPtr operand;
    if (s_.at(TokenType::op, "-") || s_.at(TokenType::op, "+")) {
      Token sign = s_.next();
      operand = make(ExprKind::unary, sign.line, sign.value);
      operand->items.push_back(unary(false));
    } else {
      operand = primary();
    }
    operand = postfix(std::move(operand));
    return with_filters ? filters_and_tests(std::move(operand)) : std::move(operand);
  }

  ExprPtr primary() {
    const Token& token = s_.current();
    int line = token.line;
    switch (token.type) {
      case TokenType::name:
        return name_or_constant();
      case TokenType::string: {
        std::string text;
        while (s_.at(TokenType::string)) text += s_.next().value;  // adjacent strings join, as in Python
        return literal(Value(text), line);
      }
      case TokenType::integer:
        return literal(Value(integer_value(s_.next())), line);
      case TokenType::floating:
        return literal(Value(std::strtod(s_.next().value.c_str(), nullptr)), line);
      default:
        break;
    }
    if (s_.skip_if(TokenType::op, "(")) {
      ExprPtr inner = tuple(true, {}, true);
      s_.expect(TokenType::op, ")", ")");
      return inner;
    }
    if (s_.at(TokenType::op, "[")) return collection(ExprKind::list, "]");
    if (s_.at(TokenType::op, "{")) return collection(ExprKind::dict, "}");
    s_.fail("unexpected '" + describe_token(token) + "'");
  }

  // A decimal integer, or one with a 0b, 0o or 0x prefix (the lexer dropped the underscores).
  int64_t integer_value(const Token& token) {
    const std::string& text = token.value;
    char prefix = text.size() > 2 && text[0] == '0' ? text[1] : 0;
    int base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : prefix == 'x' ? 16 : 10;
    errno = 0;
    long long value = std::strtoll(text.c_str() + (base == 10 ? 0 : 2), nullptr, base);
    if (errno == ERANGE) s_.fail("integer " + token.value + " does not fit in 64 bits");
    return value;
  }

  ExprPtr name_or_constant() {
    Token token = s_.next();
    const std::string& name = token.value;
    if (name == "true" || name == "True") return literal(Value(true), token.line);
    if (name == "false" || name == "False") return literal(Value(false), token.line);
    if (name == "none" || name == "None") return literal(Value(nullptr), token.line);
    return make(ExprKind::name, token.line, name);
  }

  // [a, b] or {k: v, ...}: items up to `close`, a trailing comma allowed.
  ExprPtr collection(ExprKind kind, const char* close) {
    ExprPtr expr = make(kind, s_.next().line);
    for (bool first = true; !s_.at(TokenType::op, close); first = false) {
      if (!first) {
        s_.expect(TokenType::op, ",", ",");
        if (s_.at(TokenType::op, close)) break;
      }
      expr->items.push_back(expression(true));
      if (kind != ExprKind::dict) continue;
      s_.expect(TokenType::op, ":", ":");
      expr->items.push_back(expression(true));
    }
    s_.expect(TokenType::op, close, close);
    return expr;
  }

  ExprPtr call(ExprPtr callee) {
    ExprPtr expr = make(ExprKind::call, s_.current().line);
    expr->items.push_back(std::move(callee));
    call_arguments(*expr);
    return expr;
  }

  ExprPtr postfix(ExprPtr operand) {
    for (int links = 1;; ++links) {
      s_.check_chain(links);
      if (s_.at(TokenType::op, ".")) {
        operand = dotted(std::move(operand));
      } else if (s_.at(TokenType::op, "[")) {
        operand = subscript(std::move(operand));
      } else if (s_.at(TokenType::op, "(")) {
        operand = call(std::move(operand));
      } else {
        return operand;
      }
    }
  }

  ExprPtr dotted(ExprPtr operand) {
    int line = s_.next().line;
    if (s_.at(TokenType::integer)) {  // messages.0 is messages[0]
      ExprPtr expr = make(ExprKind::item, line);
      expr->items.push_back(std::move(operand));
      expr->items.push_back(literal(Value(integer_value(s_.next())), line));
      return expr;
    }
    ExprPtr expr = make(ExprKind::attribute, line, s_.expect(TokenType::name, "", "name").value);
    expr->items.push_back(std::move(operand));
    return expr;
  }

  ExprPtr subscript(ExprPtr operand) {
    int line = s_.next().line;
    ExprPtr first = s_.at(TokenType::op, ":") ? nullptr : expression(true);
    if (s_.skip_if(TokenType::op, ":")) return slice(std::move(operand), std::move(first), line);
    ExprPtr expr = make(ExprKind::item, line);
    expr->items.push_back(std::move(operand));
    if (s_.at(TokenType::op, ",")) {  // a[1, 2] looks up the tuple (1, 2)
      ExprPtr key = make(ExprKind::tuple, line);
      key->items.push_back(std::move(first));
      while (s_.skip_if(TokenType::op, ",") && !s_.at(TokenType::op, "]")) key->items.push_back(expression(true));
      first = std::move(key);
    }
    expr->items.push_back(std::move(first));
    s_.expect(TokenType::op, "]", "]");
    return expr;
  }

  // operand[start:stop:step] once the first ':' is read.
  ExprPtr slice(ExprPtr operand, ExprPtr start, int line) {
    auto bound = [&]() { return s_.at(TokenType::op, "]") || s_.at(TokenType::op, ":") ? nullptr : expression(true); };
    ExprPtr stop = bound();
    ExprPtr step = s_.skip_if(TokenType::op, ":") ? bound() : nullptr;
    s_.expect(TokenType::op, "]", "]");
    ExprPtr expr = make(ExprKind::slice, line);
    expr->items.push_back(std::move(operand));
    expr->items.push_back(std::move(start));
    expr->items.push_back(std::move(stop));
    expr->items.push_back(std::move(step));
    return expr;
  }

  // `(a, b, key=c)` after a callee, a filter or a test; the arguments go after what `expr` already holds.
  void call_arguments(Expr& expr) {
    s_.expect(TokenType::op, "(", "(");
    for (bool first = true; !s_.at(TokenType::op, ")"); first = false) {
      if (!first) {
        s_.expect(TokenType::op, ",", ",");
        if (s_.at(TokenType::op, ")")) break;
      }
      if (s_.at(TokenType::op, "*") || s_.at(TokenType::op, "**")) s_.fail("*args and **kwargs in calls are not supported");
      if (s_.at(TokenType::name) && s_.peek().type == TokenType::op && s_.peek().value == "=") {
        std::string name = s_.next().value;
        s_.next();
        expr.keywords.emplace_back(name, expression(true));
      } else {
        if (!expr.keywords.empty()) s_.fail("invalid syntax for function call expression");
        expr.items.push_back(expression(true));
      }
    }
    s_.expect(TokenType::op, ")", ")");
  }

  ExprPtr filters_and_tests(ExprPtr operand) {
    for (int links = 1;; ++links) {
      s_.check_chain(links);
      if (s_.skip_if(TokenType::op, "|")) {
        operand = filter(std::move(operand));
      } else if (s_.at_name("is")) {
        operand = test(std::move(operand));
      } else if (s_.at(TokenType::op, "(")) {
        operand = call(std::move(operand));
      } else {
        return operand;
      }
    }
  }

  std::string dotted_name() {
    std::string name = s_.expect(TokenType::name, "", "name").value;
    while (s_.skip_if(TokenType::op, ".")) name += "." + s_.expect(TokenType::name, "", "name").value;
    return name;
  }

  ExprPtr filter(ExprPtr operand) {
    int line = s_.current().line;
    std::string name = dotted_name();
    if (!has_filter(name)) s_.fail(missing_filter_message(name));
    ExprPtr expr = make(ExprKind::filter, line, name);
    expr->items.push_back(std::move(operand));
    if (s_.at(TokenType::op, "(")) call_arguments(*expr);
    return expr;
  }

  ExprPtr test(ExprPtr operand) {
    int line = s_.next().line;
    bool negated = s_.skip_if(TokenType::name, "not");
    std::string name = dotted_name();
    if (!has_test(name)) s_.fail(missing_test_message(name));
    ExprPtr expr = make(ExprKind::test, line, name);
    expr->negated = negated;
    expr->items.push_back(std::move(operand));
    if (s_.at(TokenType::op, "(")) {
      call_arguments(*expr);
    } else if (takes_bare_argument()) {
      expr->items.push_back(postfix(primary()));
    }
    return expr;
  }

  // `x is divisibleby 3`, `x is sameas none`: a test's one argument may follow without parentheses.
  bool takes_bare_argument() const {
    const Token& t = s_.current();
    if (t.type == TokenType::name) return t.value != "else" && t.value != "or" && t.value != "and" && t.value != "is";
    return t.type == TokenType::string || t.type == TokenType::integer || t.type == TokenType::floating ||
           (t.type == TokenType::op && (t.value == "(" || t.value == "[" || t.value == "{"));
  }

  TokenStream& s_;
};

}  // namespace

ExprPtr parse_expression(TokenStream& stream, bool with_conditional) {
  return ExpressionParser(stream).expression(with_conditional);
}

ExprPtr parse_tuple(TokenStream& stream, bool with_conditional, const std::vector<std::string>& end_names) {
  return ExpressionParser(stream).tuple(with_conditional, end_names, false);
}

ExprPtr parse_filter_chain(TokenStream& stream) { return ExpressionParser(stream).filters(nullptr, true); }

}  // namespace probekit::chat
