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
  holders_.assign((size_t)num_blocks, 0);
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
  holders_[(size_t)b] = 1;
  return b;
}

void KvCache::retain_block(int32_t block) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_ && holders_[(size_t)block] > 0, "retaining block {} of {}", block,
              num_blocks_);
  holders_[(size_t)block]++;
}

void KvCache::free_block(int32_t block) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_ && holders_[(size_t)block] > 0, "freeing block {} of {}", block,
              num_blocks_);
  if (--holders_[(size_t)block] == 0) free_.push_back(block);
}

void KvCache::copy_block(int32_t dst, int32_t src) {
  RBEE_ASSERT(dst >= 0 && dst < num_blocks_ && src >= 0 && src < num_blocks_, "copying block {} to {} of {}", src,
              dst, num_blocks_);
  for (size_t l = 0; l < k_.size(); ++l) {
    ops::copy(k_[l].narrow(0, dst, 1), k_[l].narrow(0, src, 1));
    ops::copy(v_[l].narrow(0, dst, 1), v_[l].narrow(0, src, 1));
  }
}

bool SequenceKv::reserve(KvCache& cache, int positions) {
  const int needed = (positions + cache.block_size() - 1) / cache.block_size();
  if (needed <= (int)blocks_.size()) return true;
  if (needed - (int)blocks_.size() > cache.free_blocks()) return false;
  while ((int)blocks_.size() < needed) blocks_.push_back(cache.allocate_block());
  return true;
}

void SequenceKv::fork_from(KvCache& cache, const SequenceKv& parent, int positions) {
  const int bs = cache.block_size();
  const int full = positions / bs;
  const bool partial = positions % bs != 0;
  RBEE_ASSERT(length == 0 && positions <= parent.length && (int)parent.blocks_.size() >= full + (partial ? 1 : 0),
              "fork of {} positions from a sequence of {}", positions, parent.length);
  RBEE_ASSERT(!partial || !blocks_.empty(), "a fork needs a block of its own for the partly filled one");
  std::vector<int32_t> table(parent.blocks_.begin(), parent.blocks_.begin() + full);
  for (int32_t b : table) cache.retain_block(b);
  if (partial) cache.copy_block(blocks_.front(), parent.blocks_[(size_t)full]);
  table.insert(table.end(), blocks_.begin(), blocks_.end());
  blocks_ = std::move(table);
  length = positions;
}

void SequenceKv::release(KvCache& cache) {
  for (int32_t b : blocks_) cache.free_block(b);
  blocks_.clear();
  length = 0;
}

}  // namespace rbee::llm
