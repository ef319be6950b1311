#include "rbee/llm/kv_cache.h"

#include "rbee/backend/caching_allocator.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/llm/model_config.h"
#include "rbee/ops.h"

namespace rbee::llm {

KvLayout KvLayout::single(Device& device, const ModelConfig& config) {
  KvLayout layout;
  layout.head_dim = config.head_dim;
  layout.layers.assign((size_t)config.n_layers, {Part{&device, config.n_kv_heads}});
  return layout;
}

bool KvLayout::operator==(const KvLayout& other) const {
  if (head_dim != other.head_dim || layers.size() != other.layers.size()) return false;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].size() != other.layers[l].size()) return false;
    for (size_t p = 0; p < layers[l].size(); ++p) {
      if (layers[l][p].device != other.layers[l][p].device || layers[l][p].kv_heads != other.layers[l][p].kv_heads) {
        return false;
      }
    }
  }
  return true;
}

KvCache::KvCache(Device& device, const ModelConfig& config, int num_blocks, int block_size, DType dtype)
    : KvCache(KvLayout::single(device, config), num_blocks, block_size, dtype) {}

KvCache::KvCache(const KvLayout& layout, int num_blocks, int block_size, DType dtype)
    : layout_(layout), num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  RBEE_CHECK(num_blocks > 0 && block_size > 0, "kv cache: {} blocks of {} positions", num_blocks, block_size);
  RBEE_CHECK(dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32,
             "kv cache: dtype must be f16, bf16 or f32, got {}", dtype_name(dtype));
  RBEE_CHECK(layout.head_dim > 0 && !layout.layers.empty(), "kv cache: empty layout (head_dim {}, {} layers)",
             layout.head_dim, layout.layers.size());
  for (const auto& parts : layout.layers) {
    RBEE_CHECK(!parts.empty(), "kv cache: a layer without parts");
    std::vector<Tensor> ks, vs;
    for (const auto& part : parts) {
      RBEE_CHECK(part.device != nullptr && part.kv_heads > 0, "kv cache: a part needs a device and kv heads");
      const Shape shape{num_blocks, block_size, part.kv_heads, layout.head_dim};
      // Exact-size memory (long-lived), zeroed so that a bug reading unwritten slots shows up as zeros rather
      // than garbage.
      for (auto* list : {&ks, &vs}) {
        Tensor t = Tensor::empty_exact(shape, dtype, *part.device);
        part.device->kernels().fill(t, 0.0);
        list->push_back(std::move(t));
      }
    }
    k_.push_back(std::move(ks));
    v_.push_back(std::move(vs));
  }
  free_.reserve((size_t)num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  holders_.assign((size_t)num_blocks, 0);
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& parts : k_) {
    for (const auto& t : parts) total += 2 * t.nbytes();
  }
  return total;
}

int64_t KvCache::bytes_on(const Device& device) const {
  int64_t total = 0;
  for (const auto& parts : k_) {
    for (const auto& t : parts) {
      if (&t.device() == &device) total += 2 * t.nbytes();
    }
  }
  return total;
}

int64_t KvCache::bytes_for(const KvLayout& layout, const Device& device, int num_blocks, int block_size, DType dtype) {
  int64_t total = 0;
  for (const auto& parts : layout.layers) {
    for (const auto& part : parts) {
      if (part.device != &device) continue;
      const int64_t bytes = (int64_t)num_blocks * block_size * part.kv_heads * layout.head_dim * dtype_type_size(dtype);
      total += 2 * (int64_t)CachingAllocator::exact_size((size_t)bytes);
    }
  }
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
    for (size_t p = 0; p < k_[l].size(); ++p) {
      ops::copy(k_[l][p].narrow(0, dst, 1), k_[l][p].narrow(0, src, 1));
      ops::copy(v_[l][p].narrow(0, dst, 1), v_[l][p].narrow(0, src, 1));
    }
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
