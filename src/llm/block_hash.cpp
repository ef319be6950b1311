#include "rbee/llm/block_hash.h"

#include "rbee/core/error.h"

namespace rbee::llm {

namespace {
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv_bytes(uint64_t h, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}

inline uint64_t splitmix_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

BlockHash chain_block_hash(BlockHash parent, std::span<const TokenId> tokens) {
  uint64_t h = fnv_bytes(kFnvOffset, parent, 8);
  for (TokenId t : tokens) h = fnv_bytes(h, (uint32_t)t, 4);
  return splitmix_finalize(h);
}

std::vector<BlockHash> block_hashes(std::span<const TokenId> tokens, int block_size) {
  RBEE_CHECK(block_size >= 1, "block_hashes: block_size must be >= 1, got {}", block_size);
  std::vector<BlockHash> out;
  const size_t bs = (size_t)block_size;
  out.reserve(tokens.size() / bs);
  BlockHash parent = kRootBlockHash;
  for (size_t start = 0; start + bs <= tokens.size(); start += bs) {
    parent = chain_block_hash(parent, tokens.subspan(start, bs));
    out.push_back(parent);
  }
  return out;
}

}  // namespace rbee::llm
