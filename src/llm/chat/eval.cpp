// Expression evaluation of the interpreter (statements are in interpreter.cpp).
#include "llm/chat/interpreter.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"

namespace rbee::llm::jinja {

Value Interpreter::lookup(const std::string& name) const {
  if (const Value* v = frame_->find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Value Interpreter::eval(const Expr& e) {
  DepthGuard guard(*this);
  try {
    return eval_inner(e);
  } catch (Error& err) {
    locate(err, e.offset);
    throw;
  }
}

CallArgs Interpreter::eval_args(const Arguments& args) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const ExprPtr& a : args.positional) out.positional.push_back(eval(*a));
  for (const auto& [name, a] : args.keyword) out.keyword.emplace_back(name, eval(*a));
  return out;
}

Value Interpreter::call(const Value& callee, CallArgs args) {
  if (callee.is_callable()) {
    tick();
    return callee.as_callable().call(*this, std::move(args));
  }
  if (callee.is_undefined()) fail(callee.undefined_hint());
  fail(fmt::format("'{}' object is not callable", type_name(callee)));
}

Value Interpreter::eval_compare(const CompareExpr& e) {
  Value left = eval(*e.first);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr);
    bool ok = false;
    switch (op) {
      case CompareOp::Eq:
        ok = equals(left, right);
        break;
      case CompareOp::Ne:
        ok = !equals(left, right);
        break;
      case CompareOp::Lt:
        ok = compare(left, right) < 0;
        break;
      case CompareOp::Le:
        ok = compare(left, right) <= 0;
        break;
      case CompareOp::Gt:
        ok = compare(left, right) > 0;
        break;
      case CompareOp::Ge:
        ok = compare(left, right) >= 0;
        break;
      case CompareOp::In:
        ok = contains(right, left);
        break;
      case CompareOp::NotIn:
        ok = !contains(right, left);
        break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Literal:
      return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::Name:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::List: {
      const auto& n = static_cast<const ListExpr&>(e);
      std::vector<Value> items;
      items.reserve(n.items.size());
      for (const ExprPtr& item : n.items) items.push_back(eval(*item));
      return n.tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case ExprKind::Dict: {
      DictData d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k);
        d.set(key, eval(*v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Attr: {
      const auto& n = static_cast<const AttrExpr&>(e);
      return get_attr(eval(*n.object), n.name);
    }
    case ExprKind::Item: {
      const auto& n = static_cast<const ItemExpr&>(e);
      Value obj = eval(*n.object);
      return get_item(obj, eval(*n.index));
    }
    case ExprKind::Slice: {
      const auto& n = static_cast<const SliceExpr&>(e);
      Value obj = eval(*n.object);
      Value start, stop, step;
      if (n.start) start = eval(*n.start);
      if (n.stop) stop = eval(*n.stop);
      if (n.step) step = eval(*n.step);
      return get_slice(obj, n.start ? &start : nullptr, n.stop ? &stop : nullptr, n.step ? &step : nullptr);
    }
    case ExprKind::Call: {
      const auto& n = static_cast<const CallExpr&>(e);
      Value callee = eval(*n.callee);
      return call(callee, eval_args(n.args));
    }
    case ExprKind::Filter: {
      const auto& n = static_cast<const FilterExpr&>(e);
      if (!n.fn) fail(fmt::format("No filter named '{}' found.", n.name));
      Value input = n.input ? eval(*n.input) : Value();
      CallArgs args = eval_args(n.args);
      return n.fn(*this, input, args);
    }
    case ExprKind::Test: {
      const auto& n = static_cast<const TestExpr&>(e);
      if (!n.fn) fail(fmt::format("No test named '{}' found.", n.name));
      Value input = eval(*n.input);
      CallArgs args = eval_args(n.args);
      return Value::boolean(n.fn(*this, input, args) != n.negated);
    }
    case ExprKind::Unary: {
      const auto& n = static_cast<const UnaryExpr&>(e);
      Value v = eval(*n.operand);
      if (n.op == UnaryOp::Not) return Value::boolean(!truthy(v));
      return n.op == UnaryOp::Neg ? negate(v) : unary_plus(v);
    }
    case ExprKind::Binary: {
      const auto& n = static_cast<const BinaryExpr&>(e);
      Value left = eval(*n.left);
      if (n.op == BinaryOp::And) return truthy(left) ? eval(*n.right) : left;
      if (n.op == BinaryOp::Or) return truthy(left) ? left : eval(*n.right);
      return binary_op(n.op, left, eval(*n.right));
    }
    case ExprKind::Compare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::Cond: {
      const auto& n = static_cast<const CondExpr&>(e);
      if (truthy(eval(*n.cond))) return eval(*n.then_expr);
      if (n.else_expr) return eval(*n.else_expr);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    case ExprKind::BlockInput:
      if (block_inputs_.empty()) fail("internal error: filter block input is missing");
      return block_inputs_.back();
  }
  fail("internal error: unknown expression kind");
}

}  // namespace rbee::llm::jinja
