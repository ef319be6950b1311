#include <algorithm>
#include <numeric>

#include "llm/grammar/trie.h"
#include "rbee/llm/grammar.h"

namespace rbee::llm::grammar {

Vocabulary::Vocabulary(const Tokenizer& tokenizer) : size_(tokenizer.vocab_size()), trie_(std::make_unique<Trie>()) {
  bytes_.resize((size_t)size_);
  for (TokenId id = 0; id < size_; ++id) {
    if (!tokenizer.is_special(id)) bytes_[(size_t)id] = tokenizer.token_bytes(id);
  }
  end_ = tokenizer.eos_ids();
  // Tokens sorted by their bytes: each node's children and tokens then come out as contiguous runs.
  std::vector<TokenId> order;
  for (TokenId id = 0; id < size_; ++id)
    if (!bytes_[(size_t)id].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return bytes_[(size_t)a] < bytes_[(size_t)b] || (bytes_[(size_t)a] == bytes_[(size_t)b] && a < b);
  });
  // Build with explicit child lists, then lay out breadth-first into flat arrays.
  struct Build {
    std::vector<std::pair<uint8_t, int32_t>> children;
    std::vector<TokenId> tokens;
  };
  std::vector<Build> build(1);
  for (TokenId id : order) {
    int32_t n = 0;
    for (char c : bytes_[(size_t)id]) {
      const uint8_t b = (uint8_t)c;
      auto& ch = build[(size_t)n].children;
      if (!ch.empty() && ch.back().first == b) {
        n = ch.back().second;  // sorted input: the child we want is the last one made
      } else {
        const int32_t made = (int32_t)build.size();
        build[(size_t)n].children.push_back({b, made});
        build.emplace_back();
        n = made;
      }
    }
    build[(size_t)n].tokens.push_back(id);
  }
  Trie& t = *trie_;
  t.nodes.resize(build.size());
  for (size_t i = 0; i < build.size(); ++i) {
    Trie::Node& node = t.nodes[i];
    node.edges_begin = (uint32_t)t.edge_byte.size();
    for (auto [b, child] : build[i].children) {
      t.edge_byte.push_back(b);
      t.edge_node.push_back(child);
    }
    node.edges_end = (uint32_t)t.edge_byte.size();
    node.tokens_begin = (uint32_t)t.tokens.size();
    t.tokens.insert(t.tokens.end(), build[i].tokens.begin(), build[i].tokens.end());
    node.tokens_end = (uint32_t)t.tokens.size();
  }
}

Vocabulary::~Vocabulary() = default;

}  // namespace rbee::llm::grammar
