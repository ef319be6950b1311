#include "llm/tokenizer/bpe.h"

#include <queue>

#include "rbee/text/utf8.h"
#include "rbee/core/error.h"

namespace rbee::llm {

BpeModel::BpeModel(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(vocab), options_(options) {
  RBEE_CHECK(options_.unk_id >= -1 && options_.unk_id < vocab.size(), "tokenizer: unk id {} outside vocabulary of {}",
             options_.unk_id, vocab.size());
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const TokenId ia = vocab.find(a), ib = vocab.find(b);
    const TokenId ir = vocab.find(a + b);
    RBEE_CHECK(ia >= 0 && ib >= 0 && ir >= 0, "tokenizer: merge {} ('{}' '{}') names a token missing from the vocabulary",
               i, a, b);
    // The first listing of a pair decides its rank.
    merges_.emplace(key(ia, ib), Merge{static_cast<int32_t>(i), ir});
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab.find(fmt::format("<0x{:02X}>", b));
}

void BpeModel::tokenize(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    const TokenId whole = vocab_.find(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  // Symbols form a doubly linked list over the piece's characters; merging rewrites the left symbol's id
  // and unlinks the right one.
  struct Symbol {
    TokenId id;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  bool last_unk = false;
  auto push = [&](TokenId id) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1});
  };
  for (std::string_view ch : text::utf8::split_chars(piece)) {
    const TokenId id = vocab_.find(ch);
    if (id >= 0) {
      push(id);
      last_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) push(byte_ids_[static_cast<uint8_t>(c)]);
        last_unk = false;
        continue;
      }
    }
    if (options_.unk_id >= 0 && !(options_.fuse_unk && last_unk)) push(options_.unk_id);
    last_unk = options_.unk_id >= 0;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t left, right;
    TokenId left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = sym[l].next;
    if (r < 0) return;
    const auto it = merges_.find(key(sym[l].id, sym[r].id));
    if (it != merges_.end()) queue.push({it->second.rank, l, r, sym[l].id, sym[r].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);

  std::vector<bool> dead(sym.size(), false);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Stale when either side was merged away or changed since the candidate was queued.
    if (dead[c.left] || dead[c.right] || sym[c.left].next != c.right || sym[c.left].id != c.left_id ||
        sym[c.right].id != c.right_id) {
      continue;
    }
    sym[c.left].id = merges_.at(key(c.left_id, c.right_id)).result;
    dead[c.right] = true;
    sym[c.left].next = sym[c.right].next;
    if (sym[c.right].next >= 0) sym[sym[c.right].next].prev = c.left;
    consider(sym[c.left].prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace rbee::llm
