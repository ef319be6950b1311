// Paged KV cache: per layer, K and V tensors [num_blocks, block_size, n_kv_heads, head_dim] on the model's
// device, handed out to sequences one block at a time. A sequence's block table maps its positions to blocks,
// so sequences grow and finish independently (continuous batching) without moving memory.
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

  // Returns a free block id, or -1 when none is left.
  int32_t allocate_block();
  void free_block(int32_t block);

 private:
  int num_blocks_, block_size_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> free_;
};

// The blocks one sequence holds and how many positions it has filled.
class SequenceKv {
 public:
  // Makes room for `positions` positions in total; false (and nothing changed) when the cache is full.
  bool reserve(KvCache& cache, int positions);
  // Returns every block to the cache.
  void release(KvCache& cache);
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int length = 0;  // positions whose keys and values are in the cache

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace rbee::llm
