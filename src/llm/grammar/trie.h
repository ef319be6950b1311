// The vocabulary's token bytes as a trie in flat arrays (children of a node are a contiguous run of edges).
#pragma once

#include <cstdint>
#include <vector>

#include "rbee/llm/grammar.h"

namespace rbee::llm::grammar {

struct Vocabulary::Trie {
  struct Node {
    uint32_t edges_begin = 0, edges_end = 0;    // into edge_byte / edge_node
    uint32_t tokens_begin = 0, tokens_end = 0;  // into tokens: the tokens whose bytes end here
  };
  std::vector<Node> nodes;  // node 0 is the root (the empty prefix)
  std::vector<uint8_t> edge_byte;
  std::vector<int32_t> edge_node;
  std::vector<TokenId> tokens;
};

}  // namespace rbee::llm::grammar
