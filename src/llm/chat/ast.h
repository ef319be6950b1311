// Syntax tree of a parsed chat template. Expressions and statements each carry their byte offset in the
// (normalized) source so that runtime errors can name the line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llm/chat/value.h"

namespace rbee::llm::jinja {

// Filters and tests are resolved while parsing. As in Jinja, an unknown name is a syntax error, except inside
// an if block or a conditional expression, where it is an error only when evaluated (fn stays null).
using FilterFn = Value (*)(Interpreter& interp, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& interp, const Value& input, CallArgs& args);

// ---- expressions ---------------------------------------------------------------------------------

enum class ExprKind {
  Literal, Name, List, Dict, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, Compare, Cond, BlockInput
};
enum class UnaryOp { Neg, Pos, Not };
enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat, And, Or };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr {
  Expr(ExprKind k, size_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
  ExprKind kind;
  size_t offset;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(size_t off, Value v) : Expr(ExprKind::Literal, off), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(size_t off, std::string n) : Expr(ExprKind::Name, off), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // list or tuple display
  ListExpr(size_t off, bool is_tuple) : Expr(ExprKind::List, off), tuple(is_tuple) {}
  std::vector<ExprPtr> items;
  bool tuple;
};
struct DictExpr : Expr {
  explicit DictExpr(size_t off) : Expr(ExprKind::Dict, off) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct AttrExpr : Expr {  // object.name
  AttrExpr(size_t off, ExprPtr o, std::string n) : Expr(ExprKind::Attr, off), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct ItemExpr : Expr {  // object[index]
  ItemExpr(size_t off, ExprPtr o, ExprPtr i) : Expr(ExprKind::Item, off), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr : Expr {  // object[start:stop:step]; absent parts are null
  SliceExpr(size_t off, ExprPtr o) : Expr(ExprKind::Slice, off), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};
struct CallExpr : Expr {
  CallExpr(size_t off, ExprPtr c) : Expr(ExprKind::Call, off), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};
struct FilterExpr : Expr {  // input | name(args)
  FilterExpr(size_t off, ExprPtr in, std::string n, FilterFn f)
      : Expr(ExprKind::Filter, off), input(std::move(in)), name(std::move(n)), fn(f) {}
  ExprPtr input;
  std::string name;
  FilterFn fn;
  Arguments args;
};
struct TestExpr : Expr {  // input is [not] name(args)
  TestExpr(size_t off, ExprPtr in, std::string n, TestFn f, bool neg)
      : Expr(ExprKind::Test, off), input(std::move(in)), name(std::move(n)), fn(f), negated(neg) {}
  ExprPtr input;
  std::string name;
  TestFn fn;
  bool negated;
  Arguments args;
};
struct UnaryExpr : Expr {
  UnaryExpr(size_t off, UnaryOp o, ExprPtr e) : Expr(ExprKind::Unary, off), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};
struct BinaryExpr : Expr {
  BinaryExpr(size_t off, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::Binary, off), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};
struct CompareExpr : Expr {  // first op1 e1 op2 e2 ... (chained like Python)
  CompareExpr(size_t off, ExprPtr f) : Expr(ExprKind::Compare, off), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct CondExpr : Expr {  // then_expr if cond else else_expr (else_expr may be null: Undefined)
  CondExpr(size_t off, ExprPtr c, ExprPtr t, ExprPtr e)
      : Expr(ExprKind::Cond, off), cond(std::move(c)), then_expr(std::move(t)), else_expr(std::move(e)) {}
  ExprPtr cond, then_expr, else_expr;
};
// The rendered body of a `{% filter %}` or filtered `{% set %}` block: the innermost input of its filter chain.
struct BlockInputExpr : Expr {
  explicit BlockInputExpr(size_t off) : Expr(ExprKind::BlockInput, off) {}
};

// ---- statements ----------------------------------------------------------------------------------

enum class NodeKind { Text, Output, If, For, Set, SetBlock, Macro, FilterBlock, With, Break, Continue, Scope };

struct Node {
  Node(NodeKind k, size_t off) : kind(k), offset(off) {}
  virtual ~Node() = default;
  NodeKind kind;
  size_t offset;
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// What a for loop, set or with binds: one name, a tuple of names to unpack, or `namespace.attr`.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;    // `a, b` (values are unpacked even for one name written as `a,`)
  std::string attr;       // non-empty: names[0].attr on a namespace
};

struct TextNode : Node {
  TextNode(size_t off, std::string t) : Node(NodeKind::Text, off), text(std::move(t)) {}
  std::string text;
};
struct OutputNode : Node {
  OutputNode(size_t off, ExprPtr e) : Node(NodeKind::Output, off), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfNode : Node {
  explicit IfNode(size_t off) : Node(NodeKind::If, off) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body else_body;
};
struct ForNode : Node {
  explicit ForNode(size_t off) : Node(NodeKind::For, off) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`, may be null
  Body body;
  Body else_body;  // rendered when no item was iterated
};
struct SetNode : Node {
  explicit SetNode(size_t off) : Node(NodeKind::Set, off) {}
  Target target;
  ExprPtr value;
};
struct SetBlockNode : Node {  // {% set x %}...{% endset %}, optionally {% set x | filter %}
  explicit SetBlockNode(size_t off) : Node(NodeKind::SetBlock, off) {}
  Target target;
  ExprPtr filter;  // chain whose innermost input is a BlockInputExpr, may be null
  Body body;
};
struct MacroNode : Node {
  explicit MacroNode(size_t off) : Node(NodeKind::Macro, off) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};
struct FilterBlockNode : Node {
  explicit FilterBlockNode(size_t off) : Node(NodeKind::FilterBlock, off) {}
  ExprPtr filter;  // chain whose innermost input is a BlockInputExpr
  Body body;
};
struct WithNode : Node {
  explicit WithNode(size_t off) : Node(NodeKind::With, off) {}
  std::vector<std::pair<Target, ExprPtr>> assigns;
  Body body;
};
struct LoopControlNode : Node {  // {% break %} / {% continue %}
  LoopControlNode(size_t off, bool brk) : Node(brk ? NodeKind::Break : NodeKind::Continue, off) {}
};
struct ScopeNode : Node {  // {% generation %}: renders its body unchanged
  explicit ScopeNode(size_t off) : Node(NodeKind::Scope, off) {}
  Body body;
};

// A parsed template: the normalized source (for error positions) and its statements.
struct Program {
  std::string source;
  Body body;
};

}  // namespace rbee::llm::jinja
