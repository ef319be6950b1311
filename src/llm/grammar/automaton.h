// Automaton: a grammar's parse states built lazily into a DFA over bytes, with a token mask per state.
//
// A parse stack is a chain of nodes (pos, parent): `pos` indexes Rules::elems (a Term for the top node, the
// element to continue with for the others), `parent` the node below (-1: the bottom). Nodes are hash-consed, so
// a stack is one id and equal stacks share it. A DFA state is the sorted set of stack tops reachable after some
// bytes plus whether the root may end there; states are interned, and each has 256 transitions filled on first
// use. State 0 is dead (no stack, not accepting).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "llm/grammar/rules.h"
#include "rbee/llm/grammar.h"

namespace rbee::llm::grammar {

class Automaton {
 public:
  // `vocabulary` may be null (then mask() cannot be used).
  Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);

  // Every public method takes the automaton's lock: matchers on different threads may share one automaton.
  static constexpr int32_t kDead = 0;
  int32_t initial() const { return initial_; }
  int32_t walk(int32_t state, std::string_view bytes);  // kDead as soon as a byte is refused
  bool accepting(int32_t state) const;
  bool can_continue(int32_t state) const;
  // Tokens allowed in `state` (a bitset over the vocabulary), computed on first use and kept: the vector lives as
  // long as the automaton.
  const std::vector<uint64_t>& mask(int32_t state);

  size_t states() const;
  size_t masks_built() const;
  // Memory held (states, their transition tables, stack nodes, masks), in bytes: grows as states are visited.
  size_t bytes() const;
  const Vocabulary* vocabulary() const { return vocab_.get(); }

 private:
  struct Node {
    int32_t pos;
    int32_t parent;
  };
  struct State {
    std::vector<int32_t> tops;  // node ids whose pos is a Term, sorted
    bool accept = false;
    std::unique_ptr<int32_t[]> next;  // 256 transitions, -1 until computed
    std::shared_ptr<const std::vector<uint64_t>> mask;
  };
  int32_t step(int32_t state, uint8_t byte);  // caller holds mutex_
  int32_t node(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept, int depth);
  int32_t intern(std::vector<int32_t> tops, bool accept);

  std::shared_ptr<const Grammar> grammar_;
  const Rules& rules_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<uint64_t, std::vector<int32_t>> state_ids_;  // hash -> candidate state ids
  int32_t initial_ = 0;
  size_t masks_built_ = 0;
  std::vector<std::pair<int32_t, int32_t>> walk_;  // scratch for mask(): (trie node, state)
  mutable std::mutex mutex_;
};

}  // namespace rbee::llm::grammar
