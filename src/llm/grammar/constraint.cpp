// The TokenConstraint of a grammar: one automaton state per sequence over an automaton the sequences share.
#include "llm/grammar/automaton.h"
#include "rbee/core/error.h"

namespace rbee::llm::grammar {

namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<Automaton> automaton, int32_t state)
      : automaton_(std::move(automaton)), state_(state) {}

  const std::vector<uint64_t>& allowed() override { return automaton_->mask(state_); }

  void accept(TokenId token) override {
    const Vocabulary& v = *automaton_->vocabulary();
    RBEE_CHECK(token >= 0 && token < v.size(), "grammar: token {} outside the vocabulary", token);
    const std::string& bytes = v.bytes(token);
    const int32_t next = bytes.empty() ? Automaton::kDead : automaton_->walk(state_, bytes);
    RBEE_CHECK(next != Automaton::kDead, "grammar: token {} is not allowed here", token);
    state_ = next;
  }

  bool finished() const override { return !automaton_->can_continue(state_); }

  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<GrammarConstraint>(automaton_, state_);
  }

 private:
  std::shared_ptr<Automaton> automaton_;
  int32_t state_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> make_constraint(std::shared_ptr<const Grammar> grammar,
                                                       std::shared_ptr<const Vocabulary> vocabulary) {
  RBEE_CHECK(grammar && vocabulary, "grammar: make_constraint needs a grammar and a vocabulary");
  auto automaton = std::make_shared<Automaton>(std::move(grammar), std::move(vocabulary));
  const int32_t start = automaton->initial();
  const auto& mask = automaton->mask(start);
  bool any = false;
  for (uint64_t w : mask) any = any || w != 0;
  RBEE_CHECK(any, "grammar: no token of the model's vocabulary can start the text the grammar describes");
  return std::make_shared<GrammarConstraint>(std::move(automaton), start);
}

bool accepts(const Grammar& grammar, std::string_view text) {
  // An automaton over a non-owning handle: the caller keeps `grammar` alive for this call.
  Automaton a(std::shared_ptr<const Grammar>(&grammar, [](const Grammar*) {}), nullptr);
  const int32_t s = a.walk(a.initial(), text);
  return s != Automaton::kDead && a.accepting(s);
}

}  // namespace rbee::llm::grammar
