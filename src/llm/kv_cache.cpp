#include "rbee/llm/kv_cache.h"

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/llm/model_config.h"
#include "rbee/ops.h"

namespace rbee::llm {

KvCache::KvCache(Device& device, const ModelConfig& config, int num_blocks, int block_size, DType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  RBEE_CHECK(num_blocks > 0 && block_size > 0, "kv cache: {} blocks of {} positions", num_blocks, block_size);
  RBEE_CHECK(dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32,
             "kv cache: dtype must be f16, bf16 or f32, got {}", dtype_name(dtype));
  const Shape shape{num_blocks, block_size, config.n_kv_heads, config.head_dim};
  for (int l = 0; l < config.n_layers; ++l) {
    // Zeroed so that a bug reading unwritten slots shows up as zeros rather than garbage.
    k_.push_back(ops::zeros(shape, dtype, device));
    v_.push_back(ops::zeros(shape, dtype, device));
  }
  free_.reserve((size_t)num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& t : k_) total += 2 * t.nbytes();
  return total;
}

int32_t KvCache::allocate_block() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void KvCache::free_block(int32_t block) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_, "freeing block {} of {}", block, num_blocks_);
  free_.push_back(block);
}

bool SequenceKv::reserve(KvCache& cache, int positions) {
  const int needed = (positions + cache.block_size() - 1) / cache.block_size();
  if (needed <= (int)blocks_.size()) return true;
  if (needed - (int)blocks_.size() > cache.free_blocks()) return false;
  while ((int)blocks_.size() < needed) blocks_.push_back(cache.allocate_block());
  return true;
}

void SequenceKv::release(KvCache& cache) {
  for (int32_t b : blocks_) cache.free_block(b);
  blocks_.clear();
  length = 0;
}

}  // namespace rbee::llm
