#include "llm/chat/library.h"
#include "llm/chat/parser_impl.h"

namespace rbee::llm::jinja {

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this, cur());
  return with_condexpr ? parse_condexpr() : parse_or();
}

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  const TokenType t = cur().type;
  if (t == TokenType::VarEnd || t == TokenType::BlockEnd || is_op(")")) return true;
  for (std::string_view e : extra_end)
    if (is_name(e)) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                            bool explicit_parens) {
  const size_t offset = cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (items.size() == 1) return std::move(items[0]);
    if (!explicit_parens) fail_at(cur(), "expected an expression, got " + describe(cur()));
  }
  auto tuple = std::make_unique<ListExpr>(offset, true);
  tuple->items = std::move(items);
  return tuple;
}

ExprPtr Parser::parse_condexpr() {
  const size_t offset = cur().offset;
  const size_t unknown_mark = unknown_.size();
  ExprPtr expr = parse_or();
  bool conditional = false;
  while (skip_name("if")) {
    conditional = true;
    ExprPtr cond = parse_or();
    ExprPtr otherwise;
    if (skip_name("else")) otherwise = parse_condexpr();
    expr = std::make_unique<CondExpr>(offset, std::move(cond), std::move(expr), std::move(otherwise));
  }
  // Jinja compiles a conditional expression in a "soft" frame: unknown filters and tests in it are errors only
  // when they are evaluated.
  if (conditional) unknown_.resize(unknown_mark);
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const size_t offset = advance().offset;
    left = std::make_unique<BinaryExpr>(offset, BinaryOp::Or, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const size_t offset = advance().offset;
    left = std::make_unique<BinaryExpr>(offset, BinaryOp::And, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this, cur());
    const size_t offset = advance().offset;
    return std::make_unique<UnaryExpr>(offset, UnaryOp::Not, parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const size_t offset = cur().offset;
  ExprPtr first = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    CompareOp op;
    if (cur().type == TokenType::Operator && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                              cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
      const std::string& v = cur().value;
      op = v == "==" ? CompareOp::Eq
           : v == "!=" ? CompareOp::Ne
           : v == "<"  ? CompareOp::Lt
           : v == "<=" ? CompareOp::Le
           : v == ">"  ? CompareOp::Gt
                       : CompareOp::Ge;
      advance();
    } else if (is_name("in")) {
      op = CompareOp::In;
      advance();
    } else if (is_name("not") && peek().type == TokenType::Name && peek().value == "in") {
      op = CompareOp::NotIn;
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<CompareExpr>(offset, std::move(first));
    cmp->rest.emplace_back(op, parse_math1());
  }
  if (!cmp) return first;
  return cmp;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = advance();
    const BinaryOp op = t.value == "+" ? BinaryOp::Add : BinaryOp::Sub;
    left = std::make_unique<BinaryExpr>(t.offset, op, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const size_t offset = advance().offset;
    left = std::make_unique<BinaryExpr>(offset, BinaryOp::Concat, std::move(left), parse_math2());
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = advance();
    const BinaryOp op = t.value == "*"    ? BinaryOp::Mul
                        : t.value == "/"  ? BinaryOp::Div
                        : t.value == "//" ? BinaryOp::FloorDiv
                                          : BinaryOp::Mod;
    left = std::make_unique<BinaryExpr>(t.offset, op, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {  // left-associative, as in Jinja (not Python)
    const size_t offset = advance().offset;
    left = std::make_unique<BinaryExpr>(offset, BinaryOp::Pow, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this, cur());
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& t = advance();
    node = std::make_unique<UnaryExpr>(t.offset, t.value == "-" ? UnaryOp::Neg : UnaryOp::Pos, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  switch (t.type) {
    case TokenType::Name: {
      advance();
      if (t.value == "true" || t.value == "True") return std::make_unique<LiteralExpr>(t.offset, Value::boolean(true));
      if (t.value == "false" || t.value == "False")
        return std::make_unique<LiteralExpr>(t.offset, Value::boolean(false));
      if (t.value == "none" || t.value == "None") return std::make_unique<LiteralExpr>(t.offset, Value::none());
      return std::make_unique<NameExpr>(t.offset, t.value);
    }
    case TokenType::String: {
      std::string s;
      while (cur().type == TokenType::String) s += advance().value;  // adjacent literals concatenate
      return std::make_unique<LiteralExpr>(t.offset, Value::string(std::move(s)));
    }
    case TokenType::Integer:
      advance();
      return std::make_unique<LiteralExpr>(t.offset, Value::integer(t.int_value));
    case TokenType::Float:
      advance();
      return std::make_unique<LiteralExpr>(t.offset, Value::floating(t.float_value));
    case TokenType::Operator:
      if (t.value == "(") {
        advance();
        ExprPtr e = parse_tuple(true, {}, true);
        expect_op(")");
        return e;
      }
      if (t.value == "[") return parse_list();
      if (t.value == "{") return parse_dict();
      break;
    default:
      break;
  }
  fail_at(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_list() {
  auto list = std::make_unique<ListExpr>(advance().offset, false);
  while (!is_op("]")) {
    if (!list->items.empty()) expect_op(",");
    if (is_op("]")) break;
    list->items.push_back(parse_expression());
  }
  expect_op("]");
  return list;
}

ExprPtr Parser::parse_dict() {
  auto dict = std::make_unique<DictExpr>(advance().offset);
  while (!is_op("}")) {
    if (!dict->items.empty()) expect_op(",");
    if (is_op("}")) break;
    ExprPtr key = parse_expression();
    expect_op(":");
    dict->items.emplace_back(std::move(key), parse_expression());
  }
  expect_op("}");
  return dict;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto call = std::make_unique<CallExpr>(cur().offset, std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto call = std::make_unique<CallExpr>(cur().offset, std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = advance();
  if (t.value == ".") {
    const Token& attr = cur();
    if (attr.type == TokenType::Name) {
      advance();
      return std::make_unique<AttrExpr>(t.offset, std::move(node), attr.value);
    }
    if (attr.type == TokenType::Integer) {  // x.0 is x[0]
      advance();
      return std::make_unique<ItemExpr>(t.offset, std::move(node),
                                        std::make_unique<LiteralExpr>(attr.offset, Value::integer(attr.int_value)));
    }
    fail_at(attr, "expected an attribute name after '.', got " + describe(attr));
  }
  // '[': an index, a slice, or several of them (a tuple index).
  std::vector<ExprPtr> indices;
  std::unique_ptr<SliceExpr> slice;
  while (!is_op("]")) {
    if (!indices.empty() || slice) expect_op(",");
    if (slice) fail_at(cur(), "a slice cannot be part of a tuple index");
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) {
        indices.push_back(std::move(start));
        continue;
      }
    }
    if (!indices.empty()) fail_at(cur(), "a slice cannot be part of a tuple index");
    slice = std::make_unique<SliceExpr>(t.offset, std::move(node));
    slice->start = std::move(start);
    advance();  // ':'
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression();
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression();
    }
  }
  expect_op("]");
  if (slice) return slice;
  if (indices.empty()) fail_at(t, "empty subscript '[]'");
  ExprPtr index;
  if (indices.size() == 1) {
    index = std::move(indices[0]);
  } else {
    auto tuple = std::make_unique<ListExpr>(t.offset, true);
    tuple->items = std::move(indices);
    index = std::move(tuple);
  }
  return std::make_unique<ItemExpr>(t.offset, std::move(node), std::move(index));
}

Arguments Parser::parse_call_args() {
  expect_op("(");
  Arguments args;
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) fail_at(cur(), "*args and **kwargs in calls are not supported in chat templates");
    if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().value == "=") {
      std::string name = advance().value;
      advance();  // '='
      for (const auto& [k, v] : args.keyword)
        if (k == name) fail_at(cur(), fmt::format("keyword argument '{}' repeated", name));
      args.keyword.emplace_back(std::move(name), parse_expression());
    } else {
      if (!args.keyword.empty()) fail_at(cur(), "positional argument follows keyword argument");
      args.positional.push_back(parse_expression());
    }
  }
  expect_op(")");
  return args;
}

ExprPtr Parser::parse_filter(ExprPtr node) {
  const Token& bar = advance();  // '|'
  const Token& name_tok = expect_name("a filter name after '|'");
  std::string name = name_tok.value;
  while (is_op(".")) {
    advance();
    name += "." + expect_name("a filter name").value;
  }
  const FilterFn fn = find_filter(name);
  if (!fn) unknown_.push_back({name_tok.offset, fmt::format("no filter named '{}'", name)});
  auto filter = std::make_unique<FilterExpr>(bar.offset, std::move(node), std::move(name), fn);
  if (is_op("(")) filter->args = parse_call_args();
  return filter;
}

ExprPtr Parser::parse_filter_chain(ExprPtr input) {
  skip_op("|");
  const Token& name_tok = expect_name("a filter name");
  const FilterFn fn = find_filter(name_tok.value);
  if (!fn) unknown_.push_back({name_tok.offset, fmt::format("no filter named '{}'", name_tok.value)});
  auto filter = std::make_unique<FilterExpr>(name_tok.offset, std::move(input), name_tok.value, fn);
  if (is_op("(")) filter->args = parse_call_args();
  ExprPtr node = std::move(filter);
  while (is_op("|")) node = parse_filter(std::move(node));
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const Token& is_tok = advance();  // 'is'
  const bool negated = skip_name("not");
  const Token& name_tok = expect_name("a test name after 'is'");
  std::string name = name_tok.value;
  while (is_op(".")) {
    advance();
    name += "." + expect_name("a test name").value;
  }
  const TestFn fn = find_test(name);
  if (!fn) unknown_.push_back({name_tok.offset, fmt::format("no test named '{}'", name)});
  auto test = std::make_unique<TestExpr>(is_tok.offset, std::move(node), std::move(name), fn, negated);
  const TokenType t = cur().type;
  if (is_op("(")) {
    test->args = parse_call_args();
  } else if ((t == TokenType::Name || t == TokenType::String || t == TokenType::Integer || t == TokenType::Float ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    // One argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
    if (is_name("is")) fail_at(cur(), "tests cannot be chained with 'is'");
    test->args.positional.push_back(parse_postfix(parse_primary()));
  }
  return test;
}

}  // namespace rbee::llm::jinja
