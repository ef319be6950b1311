// Paged KV cache: per layer, K and V tensors [num_blocks, block_size, n_kv_heads, head_dim], handed out to
// sequences one block at a time. A sequence's block table maps its positions to blocks, so sequences grow and
// finish independently (continuous batching) without moving memory. A block may be held by several sequences
// (forks of one prompt share its full blocks); it is free again when its last holder lets go.
//
// Where the tensors live follows the model's placement (KvLayout): every layer on the model's device, each layer
// on the device that runs it (layer split, partial offload), or each layer cut by kv heads into one part per
// tensor-parallel shard. Block ids are shared by every layer and part, so one block table serves them all.
#pragma once

#include <cstdint>
#include <vector>

#include "rbee/core/tensor.h"

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
  int free_blocks() const { return (int)free_.size(); }
  DType dtype() const { return dtype_; }
  int64_t bytes() const;
  // Bytes of the parts that live on `device`.
  int64_t bytes_on(const Device& device) const;
  // Bytes a cache of this layout and size takes on `device` (what the constructor will allocate there).
  static int64_t bytes_for(const KvLayout& layout, const Device& device, int num_blocks, int block_size, DType dtype);

  // Returns a free block id (held once), or -1 when none is left.
  int32_t allocate_block();
  // One more holder of an allocated block.
  void retain_block(int32_t block);
  // One holder lets go; the block is free when none is left.
  void free_block(int32_t block);
  // Copies every layer's keys and values of block `src` into block `dst`.
  void copy_block(int32_t dst, int32_t src);

 private:
  KvLayout layout_;
  int num_blocks_, block_size_;
  DType dtype_;
  std::vector<std::vector<Tensor>> k_, v_;
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
