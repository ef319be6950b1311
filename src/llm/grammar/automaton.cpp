#include "llm/grammar/automaton.h"

#include <algorithm>

#include "llm/grammar/trie.h"
#include "rbee/core/error.h"

namespace rbee::llm::grammar {

namespace {
constexpr size_t kMaxTops = 1 << 14;    // stacks in one state: beyond, the grammar is too ambiguous
constexpr size_t kMaxNodes = 1 << 22;   // stack nodes of one automaton
constexpr size_t kMaxStates = 1 << 18;  // DFA states of one automaton

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}
}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), rules_(grammar_->rules()), vocab_(std::move(vocabulary)) {
  intern({}, false);  // state 0: dead
  std::vector<int32_t> tops;
  bool accept = false;
  for (int32_t alt : rules_.alts[(size_t)rules_.root]) expand(alt, -1, tops, accept, 0);
  initial_ = intern(std::move(tops), accept);
}

int32_t Automaton::node(int32_t pos, int32_t parent) {
  const uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)(parent + 1);
  auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  RBEE_CHECK(nodes_.size() < kMaxNodes, "grammar: more than {} parse stack nodes (nesting too deep)", kMaxNodes);
  const int32_t id = (int32_t)nodes_.size();
  nodes_.push_back({pos, parent});
  node_ids_.emplace(key, id);
  return id;
}

void Automaton::expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept, int depth) {
  RBEE_CHECK(depth < 4096, "grammar: expansion deeper than 4096 rules");
  RBEE_CHECK(tops.size() < kMaxTops, "grammar: more than {} parse stacks at once (too ambiguous)", kMaxTops);
  const Elem& e = rules_.elems[(size_t)pos];
  switch (e.kind) {
    case Elem::End:
      if (parent < 0) accept = true;
      else expand(nodes_[(size_t)parent].pos, nodes_[(size_t)parent].parent, tops, accept, depth + 1);
      return;
    case Elem::Term: tops.push_back(node(pos, parent)); return;
    case Elem::Ref: {
      const int32_t cont = node(pos + 1, parent);
      for (int32_t alt : rules_.alts[(size_t)e.rule]) expand(alt, cont, tops, accept, depth + 1);
      return;
    }
  }
}

int32_t Automaton::intern(std::vector<int32_t> tops, bool accept) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  uint64_t h = accept ? 1 : 2;
  for (int32_t t : tops) h = mix(h, (uint64_t)t);
  auto& bucket = state_ids_[h];
  for (int32_t id : bucket) {
    if (states_[(size_t)id].accept == accept && states_[(size_t)id].tops == tops) return id;
  }
  RBEE_CHECK(states_.size() < kMaxStates, "grammar: more than {} automaton states", kMaxStates);
  const int32_t id = (int32_t)states_.size();
  State s;
  s.tops = std::move(tops);
  s.accept = accept;
  s.next.reset(new int32_t[256]);
  std::fill(s.next.get(), s.next.get() + 256, -1);
  states_.push_back(std::move(s));
  bucket.push_back(id);
  return id;
}

int32_t Automaton::step(int32_t state, uint8_t byte) {
  int32_t& cached = states_[(size_t)state].next[byte];
  if (cached >= 0) return cached;
  std::vector<int32_t> tops;
  bool accept = false;
  // (Copy: expand() may grow nodes_, and intern() states_.)
  const std::vector<int32_t> from = states_[(size_t)state].tops;
  for (int32_t t : from) {
    const Node n = nodes_[(size_t)t];
    if (rules_.elems[(size_t)n.pos].bytes.has(byte)) expand(n.pos + 1, n.parent, tops, accept, 0);
  }
  const int32_t next = tops.empty() && !accept ? kDead : intern(std::move(tops), accept);
  states_[(size_t)state].next[byte] = next;
  return next;
}

bool Automaton::accepting(int32_t state) const {
  std::lock_guard lock(mutex_);
  return states_[(size_t)state].accept;
}

bool Automaton::can_continue(int32_t state) const {
  std::lock_guard lock(mutex_);
  return !states_[(size_t)state].tops.empty();
}

size_t Automaton::states() const {
  std::lock_guard lock(mutex_);
  return states_.size();
}

size_t Automaton::masks_built() const {
  std::lock_guard lock(mutex_);
  return masks_built_;
}

size_t Automaton::bytes() const {
  std::lock_guard lock(mutex_);
  size_t total = nodes_.size() * (sizeof(Node) + 2 * sizeof(uint64_t)) + states_.size() * (sizeof(State) + 256 * 4);
  for (const State& s : states_) total += s.tops.size() * sizeof(int32_t);
  if (vocab_) total += masks_built_ * (((size_t)vocab_->size() + 63) / 64) * sizeof(uint64_t);
  return total;
}

int32_t Automaton::walk(int32_t state, std::string_view bytes) {
  std::lock_guard lock(mutex_);
  for (char c : bytes) {
    state = step(state, (uint8_t)c);
    if (state == kDead) return kDead;
  }
  return state;
}

const std::vector<uint64_t>& Automaton::mask(int32_t state) {
  RBEE_ASSERT(vocab_ != nullptr, "a grammar mask needs a vocabulary");
  std::lock_guard lock(mutex_);
  if (states_[(size_t)state].mask) return *states_[(size_t)state].mask;
  const Vocabulary& v = *vocab_;
  const Vocabulary::Trie& trie = v.trie();
  auto m = std::make_shared<std::vector<uint64_t>>(((size_t)v.size() + 63) / 64, 0);
  uint64_t* bits = m->data();
  // Depth-first over the trie; a subtree is skipped at its first refused byte.
  walk_.clear();
  walk_.push_back({0, state});
  while (!walk_.empty()) {
    const auto [tn, st] = walk_.back();
    walk_.pop_back();
    const Vocabulary::Trie::Node& node = trie.nodes[(size_t)tn];
    for (uint32_t e = node.edges_begin; e < node.edges_end; ++e) {
      const int32_t next = step(st, trie.edge_byte[e]);
      if (next == kDead) continue;
      const int32_t child = trie.edge_node[e];
      const Vocabulary::Trie::Node& c = trie.nodes[(size_t)child];
      for (uint32_t k = c.tokens_begin; k < c.tokens_end; ++k) {
        const TokenId id = trie.tokens[k];
        bits[(size_t)id >> 6] |= 1ull << (id & 63);
      }
      if (c.edges_begin < c.edges_end) walk_.push_back({child, next});
    }
  }
  if (states_[(size_t)state].accept) {
    for (TokenId id : v.end_tokens()) bits[(size_t)id >> 6] |= 1ull << (id & 63);
  }
  ++masks_built_;
  states_[(size_t)state].mask = m;
  return *m;
}

}  // namespace rbee::llm::grammar
