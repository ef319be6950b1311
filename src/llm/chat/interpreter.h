// Renders a parsed Program: statements (interpreter.cpp) and expressions (eval.cpp).
//
// Scoping follows Jinja: the render context and top-level `set`s live in the root frame; each for-loop
// iteration, macro call and `with` block gets a child frame, so assignments inside them do not leak out (that
// is what namespace() is for). Rendering is bounded: recursion depth, loop iterations + calls, and string
// sizes all have limits, so a hostile template fails with an Error instead of hanging or crashing.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llm/chat/ast.h"
#include "llm/chat/value.h"

namespace rbee::llm::jinja {

class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  // The innermost binding of `name` in this frame or its parents, or nullptr.
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }
  void clear() { vars_.clear(); }

 private:
  std::unordered_map<std::string, Value> vars_;
  std::shared_ptr<Frame> parent_;
};

class Interpreter {
 public:
  // `context` must be a dict: its keys become the template's variables.
  Interpreter(const Program& program, const Value& context);
  ~Interpreter();
  std::string render();

  Value eval(const Expr& e);
  // Calls a callable value (macro, global, bound method); anything else is an error.
  Value call(const Value& callee, CallArgs args);
  Value call_macro(const MacroNode& macro, const std::weak_ptr<Frame>& closure, CallArgs args);
  // Counts one unit of work (a loop iteration or a call) against the render budget.
  void tick();
  // `now`: the local time strftime_now() formats (unset: the current time); `max_steps`: see tick().
  void set_options(std::optional<std::tm> now, uint64_t max_steps) {
    now_ = now;
    max_steps_ = max_steps;
  }
  std::tm now() const;

  static constexpr int kMaxDepth = 400;  // nested evaluations incl. macro calls

 private:
  struct DepthGuard {
    explicit DepthGuard(Interpreter& in);
    ~DepthGuard() { --interp.depth_; }
    Interpreter& interp;
  };
  enum class Flow { Normal, Break, Continue };

  void exec_body(const Body& body);
  void exec(const Node& node);
  void exec_for(const ForNode& node);
  void exec_set_block(const SetBlockNode& node);
  void exec_with(const WithNode& node);
  void assign(const Target& target, const Value& value);
  std::string capture(const Body& body, std::shared_ptr<Frame> frame);
  void emit(std::string_view text);

  Value eval_inner(const Expr& e);
  Value eval_compare(const CompareExpr& e);
  CallArgs eval_args(const Arguments& args);
  Value lookup(const std::string& name) const;
  // Adds "at line L, column C" to the first error raised below a node (innermost position wins).
  void locate(Error& err, size_t offset);

  const Program& program_;
  std::shared_ptr<Frame> globals_;
  std::shared_ptr<Frame> root_;
  std::shared_ptr<Frame> frame_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::Normal;
  int depth_ = 0;
  uint64_t steps_ = 0;
  uint64_t max_steps_ = 1'000'000;
  bool located_ = false;
  std::vector<Value> block_inputs_;  // rendered bodies of the enclosing filter / set blocks
  std::optional<std::tm> now_;
};

}  // namespace rbee::llm::jinja
