// Paged KV cache: per layer, K and V tensors [num_blocks, block_size, n_kv_heads, head_dim] on the model's
// device, handed out to sequences one block at a time. A sequence's block table maps its positions to blocks,
// so sequences grow and finish independently (continuous batching) without moving memory. A block may be held by
// several sequences (forks of one prompt share its full blocks); it is free again when its last holder lets go.
#pragma once

#include <cstdint>
#include <vector>

#include "rbee/core/tensor.h"

namespace rbee {
class Device;
}

namespace rbee::llm {

struct ModelConfig;

class KvCache {
 public:
  // dtype: F16 (default), BF16 or F32. Throws OutOfMemory when the device cannot hold it.
  KvCache(Device& device, const ModelConfig& config, int num_blocks, int block_size = 16, DType dtype = DType::F16);

  const Tensor& k(int layer) const { return k_[(size_t)layer]; }
  const Tensor& v(int layer) const { return v_[(size_t)layer]; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return (int)free_.size(); }
  DType dtype() const { return dtype_; }
  int64_t bytes() const;

  // Returns a free block id (held once), or -1 when none is left.
  int32_t allocate_block();
  // One more holder of an allocated block.
  void retain_block(int32_t block);
  // One holder lets go; the block is free when none is left.
  void free_block(int32_t block);
  // Copies every layer's keys and values of block `src` into block `dst`.
  void copy_block(int32_t dst, int32_t src);

 private:
  int num_blocks_, block_size_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> free_;
  std::vector<int32_t> holders_;  // per block
};

// The blocks one sequence holds and how many positions it has filled.
class SequenceKv {
 public:
  // Makes room for `positions` positions in total; false (and nothing changed) when the cache is full.
  bool reserve(KvCache& cache, int positions);
  // Returns every block to the cache.
  void release(KvCache& cache);
  // Turns this sequence, which holds only blocks reserved for itself (at least enough for `positions` plus what
  // it will add, minus parent's full blocks), into a continuation of parent's first `positions` positions: the
  // parent's full blocks among them are shared (not copied), a partly filled last block is copied into the
  // first block of this sequence's own. length becomes `positions`.
  void fork_from(KvCache& cache, const SequenceKv& parent, int positions);
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int length = 0;  // positions whose keys and values are in the cache

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace rbee::llm
