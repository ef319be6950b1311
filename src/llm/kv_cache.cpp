#include "rbee/llm/kv_cache.h"

#include <algorithm>

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
  const size_t n = (size_t)num_blocks;
  holders_.assign(n, 0);
  entries_.resize(n);
  published_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
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

void KvCache::unpark(int32_t b) {
  const int32_t p = prev_[(size_t)b], n = next_[(size_t)b];
  (p >= 0 ? next_[(size_t)p] : lru_head_) = n;
  (n >= 0 ? prev_[(size_t)n] : lru_tail_) = p;
  prev_[(size_t)b] = next_[(size_t)b] = -1;
  --parked_;
}

void KvCache::unpublish(int32_t b) {
  index_.erase(entries_[(size_t)b].hash);
  entries_[(size_t)b] = Entry{};
  published_[(size_t)b] = 0;
}

int32_t KvCache::allocate_block() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    unpark(b);
    unpublish(b);
    ++evictions_;
  } else {
    return -1;
  }
  holders_[(size_t)b] = 1;
  return b;
}

void KvCache::retain_block(int32_t block) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_, "retaining block {} of {}", block, num_blocks_);
  const size_t b = (size_t)block;
  if (holders_[b] == 0) {
    RBEE_ASSERT(published_[b], "retaining free block {}", block);
    unpark(block);
  }
  holders_[b]++;
}

void KvCache::free_block(int32_t block) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_ && holders_[(size_t)block] > 0, "freeing block {} of {}", block,
              num_blocks_);
  const size_t b = (size_t)block;
  if (--holders_[b] > 0) return;
  if (!published_[b]) {
    free_.push_back(block);
    return;
  }
  // Parked as the most recently used.
  prev_[b] = lru_tail_;
  next_[b] = -1;
  (lru_tail_ >= 0 ? next_[(size_t)lru_tail_] : lru_head_) = block;
  lru_tail_ = block;
  ++parked_;
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

int32_t KvCache::find_cached(BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) const {
  const auto it = index_.find(hash);
  if (it == index_.end()) return -1;
  const Entry& e = entries_[(size_t)it->second];
  // The hash is only 64 bits: the block's own tokens and its parent's hash must match too.
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

bool KvCache::publish_block(int32_t block, BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) {
  RBEE_ASSERT(block >= 0 && block < num_blocks_ && holders_[(size_t)block] > 0, "publishing block {} of {}", block,
              num_blocks_);
  RBEE_ASSERT((int)tokens.size() == block_size_, "publishing a block of {} tokens (block size {})", tokens.size(),
              block_size_);
  if (published_[(size_t)block] || index_.count(hash)) return false;
  index_.emplace(hash, block);
  entries_[(size_t)block] = Entry{hash, parent, std::vector<TokenId>(tokens.begin(), tokens.end())};
  published_[(size_t)block] = 1;
  return true;
}

void KvCache::clear_prefix_index() {
  while (lru_head_ >= 0) {
    const int32_t b = lru_head_;
    unpark(b);
    unpublish(b);
    free_.push_back(b);
  }
  for (int32_t b = 0; b < num_blocks_; ++b) {
    if (published_[(size_t)b]) unpublish(b);
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
  hashes_.assign(parent.hashes_.begin(), parent.hashes_.begin() + std::min<size_t>((size_t)full, parent.hashes_.size()));
  length = positions;
}

int SequenceKv::adopt_cached_prefix(KvCache& cache, std::span<const TokenId> tokens, int limit) {
  const int bs = cache.block_size();
  RBEE_ASSERT((int)hashes_.size() == length / bs, "adopting cached blocks after position {} with {} hashed blocks",
              length, hashes_.size());
  const int start = length;
  limit = std::min(limit, (int)tokens.size());
  for (size_t i = hashes_.size(); (int)((i + 1) * (size_t)bs) <= limit; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : hashes_[i - 1];
    const auto block_tokens = tokens.subspan(i * (size_t)bs, (size_t)bs);
    const BlockHash h = chain_block_hash(parent, block_tokens);
    const int32_t b = cache.find_cached(h, parent, block_tokens);
    if (b < 0) break;
    cache.retain_block(b);
    if (i < blocks_.size()) {
      cache.free_block(blocks_[i]);  // this sequence's own block: unwritten, or partly written with the same values
      blocks_[i] = b;
    } else {
      blocks_.push_back(b);
    }
    hashes_.push_back(h);
    length = (int)((i + 1) * (size_t)bs);
  }
  return length - start;
}

void SequenceKv::publish_full_blocks(KvCache& cache, std::span<const TokenId> tokens, std::span<const TokenId> more) {
  const size_t bs = (size_t)cache.block_size();
  RBEE_ASSERT(tokens.size() + more.size() >= (size_t)length, "publishing {} positions with {} tokens", length,
              tokens.size() + more.size());
  std::vector<TokenId> gathered;
  for (size_t i = hashes_.size(); (i + 1) * bs <= (size_t)length && i < blocks_.size(); ++i) {
    std::span<const TokenId> block_tokens;
    if ((i + 1) * bs <= tokens.size()) {
      block_tokens = tokens.subspan(i * bs, bs);
    } else {  // the block reaches into `more`
      gathered.clear();
      for (size_t p = i * bs; p < (i + 1) * bs; ++p) gathered.push_back(p < tokens.size() ? tokens[p] : more[p - tokens.size()]);
      block_tokens = gathered;
    }
    const BlockHash parent = i == 0 ? kRootBlockHash : hashes_[i - 1];
    const BlockHash h = chain_block_hash(parent, block_tokens);
    cache.publish_block(blocks_[i], h, parent, block_tokens);
    hashes_.push_back(h);
  }
}

void SequenceKv::release(KvCache& cache) {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) cache.free_block(*it);
  blocks_.clear();
  hashes_.clear();
  length = 0;
}

}  // namespace rbee::llm
