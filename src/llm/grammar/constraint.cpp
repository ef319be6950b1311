// The TokenConstraint of a grammar: one automaton state per sequence over an automaton the sequences share.
#include <algorithm>
#include <list>
#include <mutex>

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

// A matcher at the automaton's initial state, refused when no token of the vocabulary can begin the text.
std::shared_ptr<const TokenConstraint> start_of(std::shared_ptr<Automaton> automaton) {
  const int32_t start = automaton->initial();
  const auto& mask = automaton->mask(start);
  bool any = false;
  for (uint64_t w : mask) any = any || w != 0;
  RBEE_CHECK(any, "grammar: no token of the model's vocabulary can start the text the grammar describes");
  return std::make_shared<GrammarConstraint>(std::move(automaton), start);
}

}  // namespace

std::shared_ptr<const TokenConstraint> make_constraint(std::shared_ptr<const Grammar> grammar,
                                                       std::shared_ptr<const Vocabulary> vocabulary) {
  RBEE_CHECK(grammar && vocabulary, "grammar: make_constraint needs a grammar and a vocabulary");
  return start_of(std::make_shared<Automaton>(std::move(grammar), std::move(vocabulary)));
}

struct ConstraintCache::Impl {
  std::shared_ptr<const Vocabulary> vocab;
  size_t capacity;
  size_t max_bytes;
  mutable std::mutex mutex;
  std::list<std::pair<std::string, std::shared_ptr<Automaton>>> lru;  // most recently used first
};

ConstraintCache::ConstraintCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity, size_t max_bytes)
    : impl_(std::make_unique<Impl>()) {
  RBEE_CHECK(vocabulary != nullptr, "grammar: a constraint cache needs a vocabulary");
  impl_->vocab = std::move(vocabulary);
  impl_->capacity = std::max<size_t>(capacity, 1);
  impl_->max_bytes = max_bytes;
}

ConstraintCache::~ConstraintCache() = default;

size_t ConstraintCache::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->lru.size();
}

std::shared_ptr<const TokenConstraint> ConstraintCache::get(const std::shared_ptr<const Grammar>& grammar) {
  RBEE_CHECK(grammar != nullptr, "grammar: none given");
  std::shared_ptr<Automaton> automaton;
  {
    std::lock_guard lock(impl_->mutex);
    auto& lru = impl_->lru;
    for (auto it = lru.begin(); it != lru.end(); ++it) {
      if (it->first == grammar->source()) {
        automaton = it->second;
        lru.splice(lru.begin(), lru, it);
        break;
      }
    }
    if (!automaton) {
      automaton = std::make_shared<Automaton>(grammar, impl_->vocab);
      lru.emplace_front(grammar->source(), automaton);
    }
    // Drop from the least recently used end; the one just asked for stays.
    size_t total = 0;
    for (const auto& entry : lru) total += entry.second->bytes();
    while (lru.size() > 1 && (lru.size() > impl_->capacity || total > impl_->max_bytes)) {
      total -= std::min(total, lru.back().second->bytes());  // (it may have grown since)
      lru.pop_back();
    }
  }
  return start_of(std::move(automaton));
}

bool accepts(const Grammar& grammar, std::string_view text) {
  // An automaton over a non-owning handle: the caller keeps `grammar` alive for this call.
  Automaton a(std::shared_ptr<const Grammar>(&grammar, [](const Grammar*) {}), nullptr);
  const int32_t s = a.walk(a.initial(), text);
  return s != Automaton::kDead && a.accepting(s);
}

}  // namespace rbee::llm::grammar
