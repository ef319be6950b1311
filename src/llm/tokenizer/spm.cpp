#include "llm/tokenizer/spm.h"

#include <queue>

#include "rbee/text/utf8.h"
#include "rbee/core/error.h"

namespace rbee::llm {

SpmModel::SpmModel(const Vocab& vocab, TokenId unk_id) : vocab_(vocab), unk_id_(unk_id) {
  RBEE_CHECK(unk_id >= -1 && unk_id < vocab.size(), "tokenizer: unk id {} outside vocabulary of {}", unk_id,
             vocab.size());
  for (int b = 0; b < 256; ++b) {
    TokenId id = vocab.find(fmt::format("<0x{:02X}>", b));
    // Vocabularies without byte tokens may still hold the byte itself as a token.
    if (id < 0) id = vocab.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_ids_[b] = id;
  }
}

void SpmModel::emit_bytes(std::string_view text, std::vector<TokenId>& out) const {
  for (char c : text) {
    const TokenId id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    }
  }
}

void SpmModel::tokenize(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  // Symbols are byte ranges of `text` in a doubly linked list; a merge grows the left one.
  struct Symbol {
    uint32_t begin, len;
    int32_t prev, next;
    int32_t from_left = -1, from_right = -1;  // the two symbols it was merged from (for re-splitting)
  };
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (std::string_view ch : text::utf8::split_chars(text)) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(ch.data() - text.data()), static_cast<uint32_t>(ch.size()), n - 1, n + 1});
  }
  sym.back().next = -1;
  // Merged symbols are recorded as new nodes so the original pair survives for re-splitting.
  struct Node {
    uint32_t begin, len;
    int32_t left, right;  // children, -1 for a character
  };
  std::vector<Node> nodes;
  nodes.reserve(sym.size() * 2);
  std::vector<int32_t> node_of(sym.size());
  for (size_t i = 0; i < sym.size(); ++i) {
    node_of[i] = static_cast<int32_t>(nodes.size());
    nodes.push_back({sym[i].begin, sym[i].len, -1, -1});
  }

  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t len;  // combined length when queued; a mismatch means the candidate is stale
    bool operator<(const Bigram& o) const {  // max-heap on score, then the leftmost pair
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = sym[l].next;
    if (r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const TokenId id = vocab_.find(text.substr(sym[l].begin, len));
    if (id >= 0) queue.push({vocab_.score[id], l, r, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
    const int32_t node = static_cast<int32_t>(nodes.size());
    nodes.push_back({l.begin, b.len, node_of[b.left], node_of[b.right]});
    node_of[b.left] = node;
    l.len = b.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    consider(l.prev);
    consider(b.left);
  }

  // Re-split: a symbol that is not a token goes back to its two halves; a lone character that is not a token
  // goes to byte fallback.
  std::vector<int32_t> stack;
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    stack.push_back(node_of[i]);
    while (!stack.empty()) {
      const Node nd = nodes[stack.back()];
      stack.pop_back();
      const std::string_view piece = text.substr(nd.begin, nd.len);
      const TokenId id = vocab_.find(piece);
      if (id >= 0) {
        out.push_back(id);
      } else if (nd.left >= 0) {
        stack.push_back(nd.right);
        stack.push_back(nd.left);
      } else {
        emit_bytes(piece, out);
      }
    }
  }
}

}  // namespace rbee::llm
