// Chained hashes of KV-cache blocks for automatic prefix caching (kv_cache.h).
//
// The keys and values of a full block (block_size positions) depend on every token before it, not only on its
// own. Its hash therefore covers the block's token ids chained with the hash of the block before it:
//   hash(block 0) = chain(kRootBlockHash, tokens[0, bs))
//   hash(block i) = chain(hash(block i - 1), tokens[i*bs, (i+1)*bs))
// so two sequences get the same hash for block i only when their first (i + 1) * bs tokens agree (up to a 64-bit
// collision, which the cache rules out by also comparing the block's own tokens and its parent hash).
//
// chain() is FNV-1a 64 over the parent hash (8 bytes, little-endian) and then each token id (4 bytes,
// little-endian, as uint32), followed by the splitmix64 finalizer for avalanche. It is fixed and documented so
// that a router can compute the same hashes from token ids (docs/DEPLOY.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

using BlockHash = uint64_t;

// The parent hash of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x72626565'6b762d30ull;  // "rbeekv-0"

// The hash of a block holding `tokens` after a prefix whose last block hashed to `parent`.
BlockHash chain_block_hash(BlockHash parent, std::span<const TokenId> tokens);

// The chained hashes of the full blocks of `tokens` (tokens.size() / block_size of them; a partial tail block
// has none). block_size must be >= 1.
std::vector<BlockHash> block_hashes(std::span<const TokenId> tokens, int block_size);

}  // namespace rbee::llm
