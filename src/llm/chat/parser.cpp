#include "llm/chat/parser.h"

#include "llm/chat/parser_impl.h"
#include "rbee/core/error.h"

namespace rbee::llm::jinja {

std::unique_ptr<Program> parse_program(std::string_view raw) {
  auto program = std::make_unique<Program>();
  program->source = normalize_source(raw);
  Parser parser(program->source, tokenize(program->source));
  program->body = parser.parse_template();
  return program;
}

// ---- token helpers ----------------------------------------------------------------------------------

std::string Parser::describe(const Token& t) const {
  switch (t.type) {
    case TokenType::Text:
      return "template text";
    case TokenType::VarBegin:
      return "'{{'";
    case TokenType::VarEnd:
      return "end of print statement '}}'";
    case TokenType::BlockBegin:
      return "'{%'";
    case TokenType::BlockEnd:
      return "end of statement block '%}'";
    case TokenType::End:
      return "end of template";
    case TokenType::String:
      return "string literal";
    default:
      return "'" + t.value + "'";
  }
}

void Parser::fail_at(const Token& t, const std::string& message) const { syntax_error(src_, t.offset, message); }

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) fail_at(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
}

const Token& Parser::expect_name(const char* what) {
  if (cur().type != TokenType::Name) fail_at(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
  return advance();
}

void Parser::settle_unknown() {
  if (!soft_ && !unknown_.empty()) syntax_error(src_, unknown_[0].offset, unknown_[0].message);
  unknown_.clear();
}

void Parser::expect_block_end(const char* what) {
  if (cur().type != TokenType::BlockEnd)
    fail_at(cur(), fmt::format("expected end of statement block after {}, got {}", what, describe(cur())));
  settle_unknown();
  advance();
}

// ---- statements -------------------------------------------------------------------------------------

Body Parser::parse_template() {
  Body body = parse_body({}, nullptr, cur());
  if (cur().type != TokenType::End) fail_at(cur(), "unexpected " + describe(cur()));
  return body;
}

Body Parser::parse_body(std::initializer_list<std::string_view> end_names, std::string* which, const Token& opener) {
  DepthGuard guard(*this, opener);
  Body body;
  while (true) {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::Text:
        body.push_back(std::make_unique<TextNode>(t.offset, t.value));
        advance();
        break;
      case TokenType::VarBegin: {
        advance();
        ExprPtr e = parse_tuple();
        if (cur().type != TokenType::VarEnd)
          fail_at(cur(), "expected end of print statement '}}', got " + describe(cur()));
        settle_unknown();
        advance();
        body.push_back(std::make_unique<OutputNode>(t.offset, std::move(e)));
        break;
      }
      case TokenType::BlockBegin: {
        const Token& name = peek();
        if (name.type == TokenType::Name) {
          for (std::string_view end : end_names) {
            if (name.value == end) {
              advance();
              advance();
              *which = std::string(end);
              return body;
            }
          }
        }
        body.push_back(parse_statement());
        break;
      }
      case TokenType::End: {
        if (end_names.size() == 0) return body;
        std::string expected;
        for (std::string_view end : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(end) + "'";
        const SourcePos p = source_pos(src_, opener.offset);
        fail_at(t, fmt::format("unexpected end of template: looking for {} to close the block opened at line {}, "
                               "column {}",
                               expected, p.line, p.column));
      }
      default:
        fail_at(t, "unexpected " + describe(t));
    }
  }
}

Body Parser::parse_scoped_body(std::initializer_list<std::string_view> end_names, std::string* which,
                               const Token& opener) {
  const bool saved_soft = soft_;
  soft_ = false;  // loop, macro and block bodies get a new (not soft) frame in Jinja
  Body body = parse_body(end_names, which, opener);
  soft_ = saved_soft;
  return body;
}

NodePtr Parser::parse_statement() {
  const Token& open = advance();  // '{%'
  const Token& tag = cur();
  if (tag.type != TokenType::Name) fail_at(tag, "expected a tag name after '{%', got " + describe(tag));
  const std::string& name = tag.value;
  advance();
  if (name == "for") return parse_for(open);
  if (name == "if") return parse_if(open);
  if (name == "set") return parse_set(open);
  if (name == "macro") return parse_macro(open);
  if (name == "filter") return parse_filter_block(open);
  if (name == "with") return parse_with(open);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail_at(tag, fmt::format("'{}' outside of a for loop", name));
    expect_block_end(name.c_str());
    return std::make_unique<LoopControlNode>(open.offset, name == "break");
  }
  if (name == "generation") {
    expect_block_end("'generation'");
    auto node = std::make_unique<ScopeNode>(open.offset);
    std::string which;
    node->body = parse_scoped_body({"endgeneration"}, &which, open);
    expect_block_end("'endgeneration'");
    return node;
  }
  static constexpr std::string_view kUnsupported[] = {"include", "import", "from", "extends", "block", "call",
                                                      "do", "autoescape", "trans", "pluralize"};
  for (std::string_view u : kUnsupported)
    if (name == u) fail_at(tag, fmt::format("'{}' tags are not supported in chat templates", name));
  static constexpr std::string_view kEnds[] = {"endfor", "endif", "elif", "else", "endset", "endmacro",
                                               "endfilter", "endwith", "endgeneration", "endraw"};
  for (std::string_view e : kEnds)
    if (name == e) fail_at(tag, fmt::format("unexpected '{}': no open block that it closes or continues", name));
  fail_at(tag, fmt::format("unknown tag '{}'", name));
}

Target Parser::parse_target(bool allow_namespace_attr, bool allow_tuple) {
  Target target;
  auto name_of = [&](const Token& t) {
    static constexpr std::string_view kConstants[] = {"true", "false", "none", "True", "False", "None"};
    for (std::string_view c : kConstants)
      if (t.value == c) fail_at(t, fmt::format("cannot assign to the constant '{}'", t.value));
    return t.value;
  };
  if (allow_namespace_attr && cur().type == TokenType::Name && peek().type == TokenType::Operator &&
      peek().value == ".") {
    target.names.push_back(name_of(advance()));
    advance();  // '.'
    target.attr = expect_name("an attribute name").value;
    return target;
  }
  const bool parens = allow_tuple && skip_op("(");
  target.names.push_back(name_of(expect_name("a variable name")));
  while ((allow_tuple || parens) && is_op(",")) {
    advance();
    target.unpack = true;  // `a,` unpacks a one-item sequence, as in Python
    if (parens ? is_op(")") : (cur().type != TokenType::Name || is_name("in"))) break;
    target.names.push_back(name_of(expect_name("a variable name")));
  }
  if (parens) expect_op(")");
  return target;
}

NodePtr Parser::parse_for(const Token& open) {
  auto node = std::make_unique<ForNode>(open.offset);
  node->target = parse_target(false, true);
  if (!skip_name("in")) fail_at(cur(), "expected 'in' in for loop, got " + describe(cur()));
  node->iter = parse_tuple(false, {"recursive"});
  if (skip_name("if")) node->filter = parse_expression();
  if (is_name("recursive")) fail_at(cur(), "recursive for loops are not supported in chat templates");
  expect_block_end("the for loop header");
  ++loop_depth_;
  std::string which;
  node->body = parse_scoped_body({"endfor", "else"}, &which, open);
  --loop_depth_;
  if (which == "else") {
    expect_block_end("'else'");
    node->else_body = parse_scoped_body({"endfor"}, &which, open);
  }
  expect_block_end("'endfor'");
  return node;
}

NodePtr Parser::parse_if(const Token& open) {
  auto node = std::make_unique<IfNode>(open.offset);
  const bool saved_soft = soft_;
  soft_ = true;
  ExprPtr cond = parse_tuple(true);
  while (true) {
    expect_block_end("the if condition");
    std::string which;
    Body body = parse_body({"elif", "else", "endif"}, &which, open);
    node->branches.emplace_back(std::move(cond), std::move(body));
    if (which == "elif") {
      cond = parse_tuple(true);
      continue;
    }
    if (which == "else") {
      expect_block_end("'else'");
      node->else_body = parse_body({"endif"}, &which, open);
    }
    soft_ = saved_soft;
    expect_block_end("'endif'");
    return node;
  }
}

NodePtr Parser::parse_set(const Token& open) {
  Target target = parse_target(true, true);
  if (skip_op("=")) {
    auto node = std::make_unique<SetNode>(open.offset);
    node->target = std::move(target);
    node->value = parse_tuple();
    expect_block_end("the set statement");
    return node;
  }
  auto node = std::make_unique<SetBlockNode>(open.offset);
  if (target.unpack) fail_at(cur(), "a set block assigns to one name, not a tuple");
  node->target = std::move(target);
  if (is_op("|")) node->filter = parse_filter_chain(std::make_unique<BlockInputExpr>(cur().offset));
  expect_block_end("the set block header");
  std::string which;
  const int saved_loop_depth = loop_depth_;
  node->body = parse_scoped_body({"endset"}, &which, open);
  loop_depth_ = saved_loop_depth;
  expect_block_end("'endset'");
  return node;
}

NodePtr Parser::parse_macro(const Token& open) {
  auto node = std::make_unique<MacroNode>(open.offset);
  node->name = expect_name("a macro name").value;
  expect_op("(");
  bool seen_default = false;
  while (!is_op(")")) {
    if (!node->params.empty()) expect_op(",");
    if (is_op(")")) break;
    const Token& p = expect_name("a parameter name");
    ExprPtr def;
    if (skip_op("=")) {
      def = parse_expression();
      seen_default = true;
    } else if (seen_default) {
      fail_at(p, "a parameter without a default follows one with a default");
    }
    node->params.emplace_back(p.value, std::move(def));
  }
  expect_op(")");
  expect_block_end("the macro header");
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;  // break/continue cannot cross a macro boundary
  std::string which;
  node->body = parse_scoped_body({"endmacro"}, &which, open);
  loop_depth_ = saved_loop_depth;
  if (cur().type == TokenType::Name && cur().value == node->name) advance();  // {% endmacro name %}
  expect_block_end("'endmacro'");
  return node;
}

NodePtr Parser::parse_filter_block(const Token& open) {
  auto node = std::make_unique<FilterBlockNode>(open.offset);
  // The tag starts with a filter name, without the leading '|'.
  node->filter = parse_filter_chain(std::make_unique<BlockInputExpr>(cur().offset));
  expect_block_end("the filter block header");
  std::string which;
  node->body = parse_scoped_body({"endfilter"}, &which, open);
  expect_block_end("'endfilter'");
  return node;
}

NodePtr Parser::parse_with(const Token& open) {
  auto node = std::make_unique<WithNode>(open.offset);
  while (cur().type != TokenType::BlockEnd) {
    if (!node->assigns.empty()) expect_op(",");
    Target t = parse_target(false, false);
    expect_op("=");
    node->assigns.emplace_back(std::move(t), parse_expression());
  }
  expect_block_end("the with header");
  std::string which;
  node->body = parse_scoped_body({"endwith"}, &which, open);
  expect_block_end("'endwith'");
  return node;
}

}  // namespace rbee::llm::jinja
