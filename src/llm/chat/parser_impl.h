// The parser's internals, shared by its statement half (parser.cpp) and expression half (parser_expr.cpp).
// The grammar and operator precedence follow Jinja's parser: condexpr < or < and < not < compare < +,- < ~ <
// *,/,//,% < ** < unary -,+ < filters and tests < postfix (.attr, [item], (call)) < primary.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "llm/chat/ast.h"
#include "llm/chat/lexer.h"

namespace rbee::llm::jinja {

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}

  Body parse_template();

  // ---- expressions (parser_expr.cpp) ----
  ExprPtr parse_expression(bool with_condexpr = true);
  // `a, b` without parentheses is a tuple. `extra_end` names end a tuple early (e.g. "in" in for targets).
  ExprPtr parse_tuple(bool with_condexpr = true, std::initializer_list<std::string_view> extra_end = {},
                      bool explicit_parens = false);
  Arguments parse_call_args();
  // Parses `[|] name(args) | name(args) ...` applied to `input` (a BlockInputExpr for filter and set blocks).
  ExprPtr parse_filter_chain(ExprPtr input);

 private:
  // ---- statements (parser.cpp) ----
  // Parses until a block tag whose name is in `end_names`; consumes `{%` and that name, and stores it in `which`.
  Body parse_body(std::initializer_list<std::string_view> end_names, std::string* which, const Token& opener);
  // parse_body with a new, not soft, scope (see soft_).
  Body parse_scoped_body(std::initializer_list<std::string_view> end_names, std::string* which, const Token& opener);
  NodePtr parse_statement();
  NodePtr parse_for(const Token& tag);
  NodePtr parse_if(const Token& tag);
  NodePtr parse_set(const Token& tag);
  NodePtr parse_macro(const Token& tag);
  NodePtr parse_filter_block(const Token& tag);
  NodePtr parse_with(const Token& tag);
  Target parse_target(bool allow_namespace_attr, bool allow_tuple);
  void expect_block_end(const char* what);

  // ---- expressions ----
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;

 public:
  // ---- token stream ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& advance() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().value == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::Name && cur().value == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(std::string_view op);
  const Token& expect_name(const char* what);
  [[noreturn]] void fail_at(const Token& t, const std::string& message) const;
  std::string describe(const Token& t) const;

  // Bounds recursion so that no template can exhaust the stack while parsing or rendering.
  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail_at(at, "template nests too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };
  static constexpr int kMaxDepth = 120;

 private:
  std::string_view src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops around the current statement (break/continue are only valid inside)
  // Unknown filter/test names seen in the current tag. Jinja reports them when compiling, except inside an
  // if/elif/else (condition and body) or a conditional expression, where it fails only if they are evaluated:
  // `soft_` marks such a context, and a tag that ends outside one turns `unknown_` into a syntax error.
  struct Unknown {
    size_t offset;
    std::string message;
  };
  std::vector<Unknown> unknown_;
  bool soft_ = false;
  void settle_unknown();
};

}  // namespace rbee::llm::jinja
