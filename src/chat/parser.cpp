#include "chat/parser.h"

#include <algorithm>
#include <optional>

#include "chat/expression_parser.h"
#include "chat/template_error.h"
#include "chat/token_stream.h"

namespace probekit::chat {

namespace {

// jinja2 tags that render other templates or change escaping: not part of a chat template's world.
constexpr const char* kRefusedTags[] = {"extends", "block", "include", "import", "from", "autoescape"};

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : " or '") + name + "'";
  return out;
}

class StatementParser {
 public:
  explicit StatementParser(std::string_view source) : s_(tokenize(source)) {}

  TemplateAst run() {
    TemplateAst ast;
    ast.body = body({});
    return ast;
  }

 private:
  StmtPtr make(StmtKind kind, int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->line = line;
    return stmt;
  }

  // Statements up to a block tag named in `end_names`; returns with that name current.
  Body body(const std::vector<std::string>& end_names) {
    Body statements;
    while (true) {
      const Token& token = s_.current();
      if (token.type == TokenType::end_of_template) {
        if (end_names.empty()) return statements;
        fail_unclosed(std::nullopt);
      }
      if (token.type == TokenType::text) {
        StmtPtr text = make(StmtKind::text, token.line);
        text->text = s_.next().value;
        statements.push_back(std::move(text));
      } else if (token.type == TokenType::variable_begin) {
        StmtPtr output = make(StmtKind::output, s_.next().line);
        output->expr = parse_tuple(s_);
        s_.expect(TokenType::variable_end, "", "end of print statement");
        statements.push_back(std::move(output));
      } else {
        s_.expect(TokenType::block_begin, "", "begin of statement block");
        if (std::find(end_names.begin(), end_names.end(), s_.current().value) != end_names.end() &&
            s_.at(TokenType::name)) {
          return statements;
        }
        statements.push_back(statement());
      }
    }
  }

  // "Unexpected end of template." or "Encountered unknown tag 'x'.", with what the open blocks wait for.
  [[noreturn]] void fail_unclosed(const std::optional<std::string>& unknown_tag) {
    std::string message = unknown_tag ? "Encountered unknown tag '" + *unknown_tag + "'." : "Unexpected end of template.";
    if (!open_blocks_.empty()) {
      const auto& [tag, end_names] = open_blocks_.back();
      message += " Jinja was looking for the following tags: " + quoted_list(end_names) + ".";
      message += " The innermost block that needs to be closed is '" + tag + "'.";
    }
    s_.fail(message);
  }

  // The body of a block tag up to one of `end_names`; returns the end tag's name, now consumed.
  std::string block_body(const std::string& tag, std::vector<std::string> end_names, Body& into) {
    open_blocks_.emplace_back(tag, end_names);
    into = body(end_names);
    open_blocks_.pop_back();
    return s_.next().value;
  }

  void end_tag() { s_.expect(TokenType::block_end, "", "end of statement block"); }

  // Ends the opening tag of a block with one body, reads the body up to "end<tag>" and ends that tag too.
  void single_body(const std::string& tag, Stmt& stmt) {
    end_tag();
    stmt.bodies.resize(1);
    block_body(tag, {"end" + tag}, stmt.bodies[0]);
    end_tag();
  }

  StmtPtr statement() {
    TokenStream::Nesting nesting(s_);
    const Token& token = s_.current();
    if (token.type != TokenType::name) s_.fail("tag name expected");
    const std::string& tag = token.value;
    if (tag == "for") return for_loop();
    if (tag == "if") return if_chain();
    if (tag == "set") return set();
    if (tag == "macro") return macro();
    if (tag == "call") return call_block();
    if (tag == "filter") return filter_block();
    if (tag == "with") return with_block();
    if (tag == "break" || tag == "continue") return loop_control();
    if (tag == "generation") return generation();
    for (const char* refused : kRefusedTags) {
      if (tag == refused) s_.fail("the '" + tag + "' tag is not supported in chat templates");
    }
    fail_unclosed(tag);
  }

  // Names separated by commas, optionally in parentheses: `a`, `k, v`, `(k, v)`.
  std::vector<std::string> target_names() {
    bool parenthesized = s_.skip_if(TokenType::op, "(");
    std::vector<std::string> names;
    do {
      names.push_back(s_.expect(TokenType::name, "", "name").value);
    } while (s_.skip_if(TokenType::op, ","));
    if (parenthesized) s_.expect(TokenType::op, ")", ")");
    return names;
  }

  StmtPtr for_loop() {
    StmtPtr loop = make(StmtKind::for_loop, s_.next().line);
    loop->targets = target_names();
    s_.expect(TokenType::name, "in", "in");
    loop->expr = parse_tuple(s_, false, {"recursive"});
    if (s_.skip_if(TokenType::name, "if")) loop->condition = parse_expression(s_);
    if (s_.at_name("recursive")) s_.fail("recursive loops are not supported");
    end_tag();
    loop->bodies.resize(2);
    loop_depth_++;
    std::string end = block_body("for", {"endfor", "else"}, loop->bodies[0]);
    loop_depth_--;
    if (end == "else") {
      end_tag();
      block_body("for", {"endfor"}, loop->bodies[1]);
    }
    end_tag();
    return loop;
  }

  StmtPtr if_chain() {
    StmtPtr chain = make(StmtKind::if_chain, s_.next().line);
    while (true) {
      chain->exprs.push_back(parse_tuple(s_, false));
      end_tag();
      chain->bodies.emplace_back();
      std::string end = block_body("if", {"elif", "else", "endif"}, chain->bodies.back());
      if (end == "elif") continue;
      if (end == "else") {
        end_tag();
        chain->bodies.emplace_back();
        block_body("if", {"endif"}, chain->bodies.back());
      }
      end_tag();
      return chain;
    }
  }

  // set x = ..., set a, b = ..., set ns.attr = ..., or the block form set x %}...{% endset %}.
  StmtPtr set() {
    int line = s_.next().line;
    std::vector<std::string> targets = target_names();
    if (targets.size() == 1 && s_.skip_if(TokenType::op, ".")) {
      targets[0] += "." + s_.expect(TokenType::name, "", "name").value;
    }
    if (s_.skip_if(TokenType::op, "=")) {
      StmtPtr assign = make(StmtKind::set, line);
      assign->targets = std::move(targets);
      assign->expr = parse_tuple(s_);
      end_tag();
      return assign;
    }
    StmtPtr block = make(StmtKind::set_block, line);
    block->targets = std::move(targets);
    if (s_.skip_if(TokenType::op, "|")) block->expr = parse_filter_chain(s_);
    single_body("set", *block);
    return block;
  }

  // (a, b=default, ...) of a macro or a call block.
  std::vector<MacroParameter> parameters() {
    std::vector<MacroParameter> list;
    s_.expect(TokenType::op, "(", "(");
    while (!s_.at(TokenType::op, ")")) {
      if (!list.empty()) s_.expect(TokenType::op, ",", ",");
      MacroParameter parameter{s_.expect(TokenType::name, "", "name").value, nullptr};
      if (s_.skip_if(TokenType::op, "=")) parameter.fallback = parse_expression(s_);
      list.push_back(std::move(parameter));
    }
    s_.expect(TokenType::op, ")", ")");
    return list;
  }

  // A macro's or a call block's body: loop controls inside do not reach a loop around it.
  void function_body(const std::string& tag, Stmt& stmt) {
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    single_body(tag, stmt);
    loop_depth_ = saved_depth;
  }

  StmtPtr macro() {
    StmtPtr macro = make(StmtKind::macro, s_.next().line);
    macro->text = s_.expect(TokenType::name, "", "name").value;
    macro->parameters = parameters();
    function_body("macro", *macro);
    return macro;
  }

  StmtPtr call_block() {
    StmtPtr call = make(StmtKind::call_block, s_.next().line);
    if (s_.at(TokenType::op, "(")) call->parameters = parameters();
    call->expr = parse_expression(s_);
    if (call->expr->kind != ExprKind::call) s_.fail("expected call");
    function_body("call", *call);
    return call;
  }

  StmtPtr filter_block() {
    StmtPtr block = make(StmtKind::filter_block, s_.next().line);
    block->expr = parse_filter_chain(s_);
    single_body("filter", *block);
    return block;
  }

  StmtPtr with_block() {
    StmtPtr with = make(StmtKind::with_block, s_.next().line);
    while (!s_.at(TokenType::block_end)) {
      if (!with->targets.empty()) s_.expect(TokenType::op, ",", ",");
      with->targets.push_back(s_.expect(TokenType::name, "", "name").value);
      s_.expect(TokenType::op, "=", "=");
      with->exprs.push_back(parse_expression(s_));
    }
    single_body("with", *with);
    return with;
  }

  StmtPtr loop_control() {
    Token token = s_.next();
    if (loop_depth_ == 0) s_.fail("'" + token.value + "' outside loop");
    end_tag();
    return make(token.value == "break" ? StmtKind::break_loop : StmtKind::continue_loop, token.line);
  }

  StmtPtr generation() {
    StmtPtr block = make(StmtKind::generation, s_.next().line);
    single_body("generation", *block);
    return block;
  }

  TokenStream s_;
  std::vector<std::pair<std::string, std::vector<std::string>>> open_blocks_;  // tag, the end tags it waits for
  int loop_depth_ = 0;
};

}  // namespace

TemplateAst parse_template(std::string_view source) { return StatementParser(source).run(); }

}  // namespace probekit::chat
