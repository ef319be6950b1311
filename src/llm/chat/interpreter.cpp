#include "llm/chat/interpreter.h"

#include "llm/chat/lexer.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"

namespace rbee::llm::jinja {

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent_.get()) {
    auto it = f->vars_.find(name);
    if (it != f->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

// The `loop` variable of one for-loop iteration.
class LoopObject final : public Object {
 public:
  LoopObject(std::shared_ptr<const std::vector<Value>> items, size_t index) : items_(std::move(items)), index_(index) {}

  Value attr(std::string_view name) const override {
    const auto n = static_cast<int64_t>(items_->size());
    const auto i = static_cast<int64_t>(index_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem")
      return i > 0 ? (*items_)[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*items_)[index_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") return Value::callable(std::make_shared<Cycle>(index_));
    return Value::undefined(fmt::format("'LoopContext' has no attribute '{}'", name));
  }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index_ + 1, items_->size()); }

 private:
  class Cycle final : public Callable {
   public:
    explicit Cycle(size_t index) : index_(index) {}
    std::string name() const override { return "loop.cycle"; }
    Value call(Interpreter&, CallArgs args) const override {
      if (!args.keyword.empty()) fail("loop.cycle() takes no keyword arguments");
      if (args.positional.empty()) fail("no items for cycling given");
      return args.positional[index_ % args.positional.size()];
    }

   private:
    size_t index_;
  };

  std::shared_ptr<const std::vector<Value>> items_;
  size_t index_;
};

// A macro defined by {% macro %}: calls render its body with the arguments bound in a new frame.
class MacroValue final : public Callable {
 public:
  MacroValue(const MacroNode& node, std::weak_ptr<Frame> closure) : node_(node), closure_(std::move(closure)) {}
  std::string name() const override { return node_.name; }
  Value call(Interpreter& interp, CallArgs args) const override {
    return interp.call_macro(node_, closure_, std::move(args));
  }

 private:
  const MacroNode& node_;
  std::weak_ptr<Frame> closure_;  // weak: the frame holds this macro, a strong pointer would be a cycle
};

}  // namespace

Interpreter::DepthGuard::DepthGuard(Interpreter& in) : interp(in) {
  if (++interp.depth_ > kMaxDepth) {
    --interp.depth_;
    fail(fmt::format("chat template recursion is deeper than {} levels", kMaxDepth));
  }
}

Interpreter::Interpreter(const Program& program, const Value& context) : program_(program) {
  root_ = std::make_shared<Frame>(nullptr);
  if (!context.is_dict()) fail("the render context must be a JSON object");
  for (const auto& [k, v] : context.as_dict().entries()) {
    if (!k.is_string()) fail("render context keys must be strings");
    root_->set(k.as_string(), v);
  }
  frame_ = root_;
}

Interpreter::~Interpreter() {
  // Values in frames may hold macros whose closures point back at frames; clearing breaks any such chain.
  if (root_) root_->clear();
}

std::string Interpreter::render() {
  std::string out;
  out_ = &out;
  exec_body(program_.body);
  return out;
}

void Interpreter::tick() {
  if (++steps_ > max_steps_)
    fail(fmt::format("chat template exceeded {} loop iterations and calls", max_steps_));
}

std::tm Interpreter::now() const {
  if (now_) return *now_;
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  return local;
}

void Interpreter::locate(Error& err, size_t offset) {
  if (located_) return;
  located_ = true;
  const SourcePos p = source_pos(program_.source, offset);
  err.add_context(fmt::format("rendering chat template at line {}, column {}", p.line, p.column));
}

void Interpreter::emit(std::string_view text) {
  check_string_size(out_->size() + text.size());
  out_->append(text);
}

void Interpreter::exec_body(const Body& body) {
  for (const NodePtr& node : body) {
    exec(*node);
    if (flow_ != Flow::Normal) return;
  }
}

std::string Interpreter::capture(const Body& body, std::shared_ptr<Frame> frame) {
  std::string text;
  std::string* saved_out = out_;
  std::shared_ptr<Frame> saved_frame = frame_;
  out_ = &text;
  frame_ = std::move(frame);
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved_out;
    frame_ = std::move(saved_frame);
    throw;
  }
  out_ = saved_out;
  frame_ = std::move(saved_frame);
  return text;
}

void Interpreter::exec(const Node& node) {
  DepthGuard guard(*this);
  try {
    switch (node.kind) {
      case NodeKind::Text:
        emit(static_cast<const TextNode&>(node).text);
        return;
      case NodeKind::Output:
        emit(to_str(eval(*static_cast<const OutputNode&>(node).expr)));
        return;
      case NodeKind::If: {
        const auto& n = static_cast<const IfNode&>(node);
        for (const auto& [cond, body] : n.branches) {
          if (truthy(eval(*cond))) {
            exec_body(body);
            return;
          }
        }
        exec_body(n.else_body);
        return;
      }
      case NodeKind::For:
        exec_for(static_cast<const ForNode&>(node));
        return;
      case NodeKind::Set: {
        const auto& n = static_cast<const SetNode&>(node);
        assign(n.target, eval(*n.value));
        return;
      }
      case NodeKind::SetBlock:
        exec_set_block(static_cast<const SetBlockNode&>(node));
        return;
      case NodeKind::Macro: {
        const auto& n = static_cast<const MacroNode&>(node);
        frame_->set(n.name, Value::callable(std::make_shared<MacroValue>(n, frame_)));
        return;
      }
      case NodeKind::FilterBlock: {
        const auto& n = static_cast<const FilterBlockNode&>(node);
        block_inputs_.push_back(Value::string(capture(n.body, std::make_shared<Frame>(frame_))));
        Value result;
        try {
          result = eval(*n.filter);
        } catch (...) {
          block_inputs_.pop_back();
          throw;
        }
        block_inputs_.pop_back();
        emit(to_str(result));
        return;
      }
      case NodeKind::With:
        exec_with(static_cast<const WithNode&>(node));
        return;
      case NodeKind::Break:
        flow_ = Flow::Break;
        return;
      case NodeKind::Continue:
        flow_ = Flow::Continue;
        return;
      case NodeKind::Scope: {
        std::shared_ptr<Frame> saved = frame_;
        frame_ = std::make_shared<Frame>(saved);
        try {
          exec_body(static_cast<const ScopeNode&>(node).body);
        } catch (...) {
          frame_ = saved;
          throw;
        }
        frame_ = saved;
        return;
      }
    }
  } catch (Error& err) {
    locate(err, node.offset);
    throw;
  }
}

void Interpreter::assign(const Target& target, const Value& value) {
  if (!target.attr.empty()) {
    const Value* ns = frame_->find(target.names[0]);
    if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
    check_storable_in_namespace(value);
    ns->as_namespace().attrs.set(Value::string(target.attr), value);
    return;
  }
  if (!target.unpack) {
    frame_->set(target.names[0], value);
    return;
  }
  const std::vector<Value> items = iterate(value);
  if (items.size() != target.names.size())
    fail(items.size() > target.names.size()
             ? fmt::format("too many values to unpack (expected {})", target.names.size())
             : fmt::format("not enough values to unpack (expected {}, got {})", target.names.size(), items.size()));
  for (size_t i = 0; i < items.size(); ++i) frame_->set(target.names[i], items[i]);
}

void Interpreter::exec_for(const ForNode& node) {
  const Value iterable = eval(*node.iter);
  std::vector<Value> items = iterate(iterable);
  const std::shared_ptr<Frame> outer = frame_;
  try {
    if (node.filter) {  // `for x in xs if cond`: loop.* then counts only the kept items
      std::vector<Value> kept;
      for (Value& item : items) {
        tick();
        frame_ = std::make_shared<Frame>(outer);
        assign(node.target, item);
        if (truthy(eval(*node.filter))) kept.push_back(std::move(item));
      }
      frame_ = outer;
      items = std::move(kept);
    }
    if (items.empty()) {
      frame_ = std::make_shared<Frame>(outer);
      exec_body(node.else_body);
      frame_ = outer;
      return;
    }
    auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
    for (size_t i = 0; i < shared_items->size(); ++i) {
      tick();
      frame_ = std::make_shared<Frame>(outer);
      assign(node.target, (*shared_items)[i]);
      frame_->set("loop", Value::object(std::make_shared<LoopObject>(shared_items, i)));
      exec_body(node.body);
      if (flow_ == Flow::Break) {
        flow_ = Flow::Normal;
        break;
      }
      flow_ = Flow::Normal;
    }
  } catch (...) {
    frame_ = outer;
    throw;
  }
  frame_ = outer;
}

void Interpreter::exec_set_block(const SetBlockNode& node) {
  Value value = Value::string(capture(node.body, frame_));
  if (node.filter) {
    block_inputs_.push_back(std::move(value));
    try {
      value = eval(*node.filter);
    } catch (...) {
      block_inputs_.pop_back();
      throw;
    }
    block_inputs_.pop_back();
  }
  assign(node.target, value);
}

void Interpreter::exec_with(const WithNode& node) {
  std::vector<Value> values;
  for (const auto& [target, expr] : node.assigns) values.push_back(eval(*expr));
  const std::shared_ptr<Frame> outer = frame_;
  frame_ = std::make_shared<Frame>(outer);
  try {
    for (size_t i = 0; i < values.size(); ++i) assign(node.assigns[i].first, values[i]);
    exec_body(node.body);
  } catch (...) {
    frame_ = outer;
    throw;
  }
  frame_ = outer;
}

Value Interpreter::call_macro(const MacroNode& macro, const std::weak_ptr<Frame>& closure, CallArgs args) {
  DepthGuard guard(*this);
  tick();
  std::shared_ptr<Frame> parent = closure.lock();
  auto frame = std::make_shared<Frame>(parent ? parent : root_);
  const size_t n = macro.params.size();
  if (args.positional.size() > n)
    fail(fmt::format("macro '{}' takes not more than {} argument(s)", macro.name, n));
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    frame->set(macro.params[i].first, std::move(args.positional[i]));
    bound[i] = true;
  }
  for (auto& [name, value] : args.keyword) {
    size_t k = 0;
    while (k < n && macro.params[k].first != name) ++k;
    if (k == n) fail(fmt::format("macro '{}' has no parameter named '{}'", macro.name, name));
    if (bound[k]) fail(fmt::format("macro '{}' got multiple values for parameter '{}'", macro.name, name));
    frame->set(name, std::move(value));
    bound[k] = true;
  }
  // Defaults are evaluated at call time inside the macro's frame (they may refer to earlier parameters).
  const std::shared_ptr<Frame> saved = frame_;
  frame_ = frame;
  try {
    for (size_t k = 0; k < n; ++k) {
      if (bound[k]) continue;
      const auto& [name, def] = macro.params[k];
      frame->set(name, def ? eval(*def) : Value::undefined(fmt::format("parameter '{}' was not provided", name)));
    }
  } catch (...) {
    frame_ = saved;
    throw;
  }
  frame_ = saved;
  const Flow saved_flow = flow_;
  flow_ = Flow::Normal;
  std::string text = capture(macro.body, frame);
  flow_ = saved_flow;
  return Value::string(std::move(text));
}

}  // namespace rbee::llm::jinja
