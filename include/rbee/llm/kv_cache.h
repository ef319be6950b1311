// Paged KV cache: per layer, K and V tensors [num_blocks, block_size, n_kv_heads, head_dim], handed out to
// sequences one block at a time. A sequence's block table maps its positions to blocks, so sequences grow and
// finish independently (continuous batching) without moving memory. A block may be held by several sequences
// (forks of one prompt share its full blocks); it is free again when its last holder lets go.
//
// Where the tensors live follows the model's placement (KvLayout): every layer on the model's device, each layer
// on the device that runs it (layer split, partial offload), or each layer cut by kv heads into one part per
// tensor-parallel shard. Block ids are shared by every layer and part, so one block table serves them all.
//
// Automatic prefix caching: a full block whose keys and values are final can be published under the chained hash
// of its token prefix (block_hash.h). When its last holder lets go it is not wiped but parked, still findable, in
// a least-recently-used list; a later sequence whose prompt starts with the same tokens finds it by hash and holds
// it read-only instead of computing those positions again. allocate_block() takes a never-published free block
// first and evicts the least recently parked cached block only when none is left, so parked blocks count as free.
// A block is in exactly one state: held (holders > 0; maybe published), parked (holders == 0, published, in the
// LRU list) or free (holders == 0, not published). Nothing here touches the device except copy_block(), so prefix
// caching is the same on every backend and every KV layout, and block tables only change which block ids a step
// reads.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "rbee/core/tensor.h"
#include "rbee/llm/block_hash.h"

namespace rbee {
class Device;
}

namespace rbee::llm {

struct ModelConfig;

// Where each layer's keys and values live.
struct KvLayout {
  struct Part {
    Device* device = nullptr;
    int kv_heads = 0;  // heads of this part (a tensor-parallel shard keeps its heads only)
  };
  int head_dim = 0;
  std::vector<std::vector<Part>> layers;  // per layer, one part per tensor-parallel shard (one without)

  // Every layer whole on one device.
  static KvLayout single(Device& device, const ModelConfig& config);
  bool operator==(const KvLayout& other) const;
};

class KvCache {
 public:
  // dtype: F16 (default), BF16 or F32. Throws OutOfMemory when a device cannot hold its part.
  KvCache(const KvLayout& layout, int num_blocks, int block_size = 16, DType dtype = DType::F16);
  // The whole cache on one device.
  KvCache(Device& device, const ModelConfig& config, int num_blocks, int block_size = 16, DType dtype = DType::F16);

  // Layer `layer`'s keys / values of tensor-parallel part `part`: [num_blocks, block_size, part kv heads, head_dim].
  const Tensor& k(int layer, int part = 0) const { return k_[(size_t)layer][(size_t)part]; }
  const Tensor& v(int layer, int part = 0) const { return v_[(size_t)layer][(size_t)part]; }
  const KvLayout& layout() const { return layout_; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // Blocks allocate_block() can hand out now: free ones plus parked cached ones.
  int free_blocks() const { return (int)free_.size() + parked_; }
  // Blocks held by at least one sequence (num_blocks() - free_blocks()).
  int used_blocks() const { return num_blocks_ - free_blocks(); }
  DType dtype() const { return dtype_; }
  int64_t bytes() const;
  // Bytes of the parts that live on `device`.
  int64_t bytes_on(const Device& device) const;
  // Bytes a cache of this layout and size takes on `device` (what the constructor will allocate there).
  static int64_t bytes_for(const KvLayout& layout, const Device& device, int num_blocks, int block_size, DType dtype);

  // Returns a block id held once (a free block, else the least recently parked cached block, which leaves the
  // prefix index), or -1 when every block is held.
  int32_t allocate_block();
  // One more holder of a held block, or the first holder of a parked cached block (it leaves the LRU list).
  void retain_block(int32_t block);
  // One holder lets go; with none left, a published block is parked (most recently used) and any other is free.
  void free_block(int32_t block);
  // Copies every layer's keys and values of block `src` into block `dst`.
  void copy_block(int32_t dst, int32_t src);

  // ---- prefix index ----
  // The published block whose hash is `hash`, whose parent hash is `parent` and whose tokens are `tokens`
  // (block_size ids), or -1. Does not retain it.
  int32_t find_cached(BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) const;
  // Publishes a held block whose block_size positions hold the final keys and values of `tokens` after the
  // prefix hashed `parent`. Returns false (and changes nothing) when another block already has this hash or the
  // block is already published: one block per prefix is enough.
  bool publish_block(int32_t block, BlockHash hash, BlockHash parent, std::span<const TokenId> tokens);
  // Forgets every published block (parked ones become free); the held ones stay held.
  void clear_prefix_index();
  int cached_blocks() const { return (int)index_.size(); }  // published blocks, held or parked
  uint64_t evictions() const { return evictions_; }         // cached blocks reused for other contents so far

 private:
  struct Entry {  // a published block
    BlockHash hash = 0, parent = 0;
    std::vector<TokenId> tokens;
  };
  void unpark(int32_t block);
  void unpublish(int32_t block);

  KvLayout layout_;
  int num_blocks_, block_size_;
  DType dtype_;
  std::vector<std::vector<Tensor>> k_, v_;
  std::vector<int32_t> free_;     // never-published free blocks (a stack)
  std::vector<int32_t> holders_;  // per block
  std::vector<Entry> entries_;    // per block; meaningful while published_[b]
  std::vector<uint8_t> published_;
  std::unordered_map<BlockHash, int32_t> index_;
  // Parked blocks as a doubly linked list through prev_/next_ (-1 ends), lru_head_ the next to evict.
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int parked_ = 0;
  uint64_t evictions_ = 0;
};

// The blocks one sequence holds and how many positions it has filled.
class SequenceKv {
 public:
  // Makes room for `positions` positions in total; false (and nothing changed) when the cache is full.
  bool reserve(KvCache& cache, int positions);
  // Returns every block to the cache, the last one first (so the deepest blocks of a parked prefix are evicted
  // before the blocks they extend).
  void release(KvCache& cache);
  // Turns this sequence, which holds only blocks reserved for itself (at least enough for `positions` plus what
  // it will add, minus parent's full blocks), into a continuation of parent's first `positions` positions: the
  // parent's full blocks among them are shared (not copied), a partly filled last block is copied into the
  // first block of this sequence's own. length becomes `positions`.
  void fork_from(KvCache& cache, const SequenceKv& parent, int positions);

  // Prefix caching. `tokens` are the sequence's token ids from position 0 (at least `length` of them).
  // Takes cached blocks for the full blocks of `tokens` from the one `length` falls in, as long as the cache has
  // them and `length` stays <= limit: each replaces this sequence's own block at that index (not yet written, or
  // written only up to `length` with the values the cached block holds), which is given back, or is appended
  // when the sequence has no block there. Every full block before `length` must be published or adopted
  // (publish_full_blocks after each step). Returns the positions gained.
  int adopt_cached_prefix(KvCache& cache, std::span<const TokenId> tokens, int limit);
  // Publishes the blocks that `length` now fills completely (their keys and values are final: nothing is
  // written below `length` again). Positions beyond `length` (e.g. rejected draft tokens) never count. The
  // sequence's tokens are `tokens` followed by `more` (a prompt and the tokens generated after it).
  void publish_full_blocks(KvCache& cache, std::span<const TokenId> tokens, std::span<const TokenId> more = {});
  int published_blocks() const { return (int)hashes_.size(); }  // blocks whose chained hash is known

  const std::vector<int32_t>& blocks() const { return blocks_; }
  int length = 0;  // positions whose keys and values are in the cache

 private:
  std::vector<int32_t> blocks_;
  std::vector<BlockHash> hashes_;  // chained hashes of the first hashes_.size() blocks (full and final)
};

}  // namespace rbee::llm
