// Automatic prefix caching at the block level (kv_cache.h, block_hash.h): the chained block hash covers every
// token id of the block and of every block before it; published blocks park on release, are found by hash with
// their tokens checked, come back out of the LRU list when adopted, and are evicted least recently parked first
// only when no free block is left.
#include <gtest/gtest.h>

#include <numeric>

#include "common/harness.h"
#include "rbee/core/error.h"
#include "rbee/llm/block_hash.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model_config.h"

namespace rbee::llm {
namespace {

constexpr int kBs = 16;

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  return c;
}

std::vector<TokenId> iota_tokens(int n, TokenId first = 1) {
  std::vector<TokenId> t((size_t)n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Known answers from an independent implementation: the Python reference of the hash in docs/DEPLOY.md.
TEST(BlockHash, MatchesTheDocumentedReference) {
  const auto t = iota_tokens(32);
  const auto h = block_hashes(t, kBs);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], 0x503df5f88404ce24ull);
  EXPECT_EQ(h[1], 0x5dc4aca735d565b7ull);
  EXPECT_EQ(chain_block_hash(kRootBlockHash, std::vector<TokenId>(16, 0x12345)), 0x2e03e8c840cd4160ull);
  EXPECT_EQ(chain_block_hash(kRootBlockHash, std::vector<TokenId>(16, 0x2345)), 0x51e5e9756a5849e9ull);
}

TEST(BlockHash, CoversEveryTokenOfTheBlockAndOfItsPrefix) {
  const auto base = iota_tokens(4 * kBs + 5);  // four full blocks and a partial one
  const auto h = block_hashes(base, kBs);
  ASSERT_EQ(h.size(), 4u) << "a partial tail block has no hash";
  for (size_t pos = 0; pos < 4 * kBs; ++pos) {
    for (TokenId delta : {1, 1 << 16, 1 << 30}) {  // low, middle and high bits of the 32-bit id
      auto t = base;
      t[pos] ^= delta;
      const auto g = block_hashes(t, kBs);
      const size_t block = pos / kBs;
      for (size_t b = 0; b < 4; ++b) {
        if (b < block) {
          EXPECT_EQ(g[b], h[b]) << "a change at position " << pos << " altered an earlier block " << b;
        } else {
          EXPECT_NE(g[b], h[b]) << "a change at position " << pos << " (bit " << delta << ") left block " << b
                                << " with the same hash";
        }
      }
    }
  }
  // The chain: block 1 of two sequences with the same block-1 tokens but different block 0 differ.
  auto other = base;
  other[0] += 7;
  EXPECT_NE(block_hashes(other, kBs)[1], h[1]);
  EXPECT_EQ(chain_block_hash(h[0], std::span(base).subspan(kBs, kBs)), h[1]);
  EXPECT_NE(chain_block_hash(h[1], std::span(base).subspan(kBs, kBs)), h[1]);
  // Same tokens, same hashes; order matters.
  EXPECT_EQ(block_hashes(base, kBs), h);
  auto swapped = base;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(block_hashes(swapped, kBs)[0], h[0]);
  EXPECT_THROW(block_hashes(base, 0), Error);
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  KvCache cache{test::cpu_device(), tiny_config(), 8, kBs, DType::F32};
};

TEST_F(PrefixCacheTest, PublishedBlocksParkOnReleaseAndAreAdoptedByHash) {
  const auto prompt = iota_tokens(3 * kBs + 4);
  SequenceKv a;
  ASSERT_TRUE(a.reserve(cache, (int)prompt.size()));
  EXPECT_EQ(cache.free_blocks(), 4);
  a.length = 2 * kBs + 3;  // two full blocks written
  a.publish_full_blocks(cache, prompt);
  EXPECT_EQ(cache.cached_blocks(), 2);
  const auto h = block_hashes(prompt, kBs);
  EXPECT_EQ(cache.find_cached(h[0], kRootBlockHash, std::span(prompt).first(kBs)), a.blocks()[0]);
  EXPECT_EQ(cache.find_cached(h[1], h[0], std::span(prompt).subspan(kBs, kBs)), a.blocks()[1]);
  EXPECT_EQ(cache.find_cached(h[2], h[1], std::span(prompt).subspan(2 * kBs, kBs)), -1) << "block 2 is not full";
  // The tokens and the parent are compared too (a 64-bit hash alone could collide).
  auto wrong = std::vector<TokenId>(prompt.begin(), prompt.begin() + kBs);
  wrong[5] = 999;
  EXPECT_EQ(cache.find_cached(h[0], kRootBlockHash, wrong), -1);
  EXPECT_EQ(cache.find_cached(h[1], kRootBlockHash, std::span(prompt).subspan(kBs, kBs)), -1);

  // A second sequence with the same prompt adopts both blocks while the first still holds them.
  SequenceKv b;
  EXPECT_EQ(b.adopt_cached_prefix(cache, prompt, (int)prompt.size() - 1), 2 * kBs);
  EXPECT_EQ(b.length, 2 * kBs);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  ASSERT_TRUE(b.reserve(cache, (int)prompt.size()));
  EXPECT_EQ(cache.free_blocks(), 2) << "shared blocks count once";

  const std::vector<int32_t> shared(a.blocks().begin(), a.blocks().begin() + 2);
  a.release(cache);
  b.release(cache);
  EXPECT_EQ(cache.free_blocks(), 8) << "parked blocks count as free";
  EXPECT_EQ(cache.used_blocks(), 0);
  EXPECT_EQ(cache.cached_blocks(), 2) << "released blocks stay findable";

  // Adoption takes them out of the LRU list; the limit keeps the last prompt token to compute.
  SequenceKv c;
  EXPECT_EQ(c.adopt_cached_prefix(cache, std::span(prompt).first(2 * kBs), 2 * kBs - 1), kBs);
  EXPECT_EQ(c.blocks(), std::vector<int32_t>{shared[0]});
  EXPECT_EQ(cache.free_blocks(), 7);
  c.release(cache);
}

TEST_F(PrefixCacheTest, AdoptionReplacesTheSequencesOwnUnwrittenBlocks) {
  const auto prompt = iota_tokens(3 * kBs);
  SequenceKv a;
  ASSERT_TRUE(a.reserve(cache, (int)prompt.size()));
  a.length = 3 * kBs;
  a.publish_full_blocks(cache, prompt);
  // b reserved its whole prompt before a published (admitted in the same step): its own blocks are swapped
  // for the cached ones as it reaches them, and given back.
  SequenceKv b;
  ASSERT_TRUE(b.reserve(cache, (int)prompt.size() + 5));
  EXPECT_EQ(cache.free_blocks(), 1);
  EXPECT_EQ(b.adopt_cached_prefix(cache, prompt, (int)prompt.size() - 1), 2 * kBs);
  EXPECT_EQ(cache.free_blocks(), 3) << "the two replaced own blocks went back";
  EXPECT_EQ((int)b.blocks().size(), 4) << "the reserved size is unchanged";
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);
  a.release(cache);
  b.release(cache);
}

TEST_F(PrefixCacheTest, PublishingSpansPromptAndOutputAndAdoptionTakesOverAPartlyWrittenBlock) {
  const auto t = iota_tokens(3 * kBs);
  SequenceKv a;
  ASSERT_TRUE(a.reserve(cache, 3 * kBs));
  a.length = 3 * kBs;
  // A prompt of 40 tokens and 8 generated ones: block 2 straddles both.
  a.publish_full_blocks(cache, std::span(t).first(40), std::span(t).subspan(40));
  const auto h = block_hashes(t, kBs);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cache.find_cached(h[(size_t)i], i ? h[(size_t)i - 1] : kRootBlockHash,
                                std::span(t).subspan((size_t)i * kBs, kBs)),
              a.blocks()[(size_t)i])
        << "block " << i;
  }
  // b computed 5 positions of block 0 itself (a prompt chunk) before a's blocks were published.
  SequenceKv b;
  ASSERT_TRUE(b.reserve(cache, 3 * kBs));
  b.length = 5;
  b.publish_full_blocks(cache, t);
  EXPECT_EQ(b.adopt_cached_prefix(cache, t, 3 * kBs - 1), 2 * kBs - 5);
  EXPECT_EQ(b.length, 2 * kBs);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_EQ(b.published_blocks(), 2);
  a.release(cache);
  b.release(cache);
  EXPECT_EQ(cache.free_blocks(), 8);
}

TEST_F(PrefixCacheTest, EvictsLeastRecentlyParkedOnlyWhenNoFreeBlockIsLeft) {
  // Two prompts of two blocks each, released one after the other: four parked blocks, four free.
  const auto p1 = iota_tokens(2 * kBs, 100);
  const auto p2 = iota_tokens(2 * kBs, 500);
  std::vector<int32_t> b1, b2;
  for (auto* p : {&p1, &p2}) {
    SequenceKv s;
    ASSERT_TRUE(s.reserve(cache, 2 * kBs));
    s.length = 2 * kBs;
    s.publish_full_blocks(cache, *p);
    (p == &p1 ? b1 : b2) = s.blocks();
    s.release(cache);
  }
  EXPECT_EQ(cache.cached_blocks(), 4);
  SequenceKv filler;
  ASSERT_TRUE(filler.reserve(cache, 4 * kBs));
  EXPECT_EQ(cache.evictions(), 0u) << "free blocks are used before cached ones";
  EXPECT_EQ(cache.cached_blocks(), 4);
  // Now every further block evicts: p1's deepest block first (released last-block-first, p1 before p2).
  SequenceKv more;
  ASSERT_TRUE(more.reserve(cache, kBs));
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_EQ(more.blocks()[0], b1[1]);
  SequenceKv probe;
  EXPECT_EQ(probe.adopt_cached_prefix(cache, p1, 2 * kBs), kBs) << "p1's first block is still cached";
  probe.release(cache);  // parks p1's block 0 again, now the most recently used
  ASSERT_TRUE(more.reserve(cache, 2 * kBs));
  EXPECT_EQ(more.blocks()[1], b2[1]) << "p2's deepest block is now the least recently parked";
  EXPECT_EQ(cache.evictions(), 2u);
  SequenceKv last;
  ASSERT_TRUE(last.reserve(cache, 2 * kBs));
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_FALSE(SequenceKv().reserve(cache, 1)) << "every block is held";
  for (auto* s : {&filler, &more, &last}) s->release(cache);
  EXPECT_EQ(cache.free_blocks(), 8);
}

TEST_F(PrefixCacheTest, OnlyCommittedPositionsArePublished) {
  // Speculative decoding writes draft positions past `length`; they must never be published.
  const auto t = iota_tokens(2 * kBs);
  SequenceKv s;
  ASSERT_TRUE(s.reserve(cache, 2 * kBs));
  s.length = 2 * kBs - 1;
  s.publish_full_blocks(cache, t);
  EXPECT_EQ(cache.cached_blocks(), 1);
  s.length = 2 * kBs;
  s.publish_full_blocks(cache, t);
  EXPECT_EQ(cache.cached_blocks(), 2);
  // A second sequence that computed the same block publishes nothing (one block per prefix).
  SequenceKv twin;
  ASSERT_TRUE(twin.reserve(cache, 2 * kBs));
  twin.length = 2 * kBs;
  twin.publish_full_blocks(cache, t);
  EXPECT_EQ(cache.cached_blocks(), 2);
  twin.release(cache);
  EXPECT_EQ(cache.free_blocks(), 6) << "the twin's unpublished blocks are free at once, not parked";
  s.release(cache);
  cache.clear_prefix_index();
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_EQ(cache.free_blocks(), 8);
}

}  // namespace
}  // namespace rbee::llm
