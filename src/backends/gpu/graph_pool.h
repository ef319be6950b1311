// GraphPool: the device memory of one captured graph.
//
// A replayed graph writes to the addresses its kernels had at capture time, including the temporaries that
// ops allocated and freed inside the captured step (activation scratch, split-K partials, ...). Had those
// blocks gone back to the caching allocator, a tensor allocated after the capture could receive one and be
// overwritten by the next replay. So while a capture is open every allocation of the device comes from the
// capture's pool: a block the step frees goes to the pool's free list (and is reused within the same capture,
// in stream order, as the caching allocator would), and the graph keeps all of them until it is released.
// After release, free blocks return to the caching allocator at once and blocks still held by live tensors
// (e.g. the captured step's outputs) when those tensors die.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "rbee/backend/caching_allocator.h"

namespace rbee::gpu {

class GraphPool final : public BufferReleaser {
 public:
  explicit GraphPool(CachingAllocator& cache) : cache_(cache) {}
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  // A block of `bytes` (rounded as the caching allocator rounds): a block the captured step freed, else one from
  // the caching allocator (whose raw allocator refuses while capturing). Sets *rounded_bytes.
  void* allocate(size_t bytes, size_t* rounded_bytes) {
    const size_t size = CachingAllocator::round_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        *rounded_bytes = size;
        return p;
      }
    }
    return cache_.allocate(bytes, rounded_bytes);
  }

  // A Buffer of this pool died: keep its block for the graph, or hand it back once the graph is released.
  void release(void* ptr, size_t bytes) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (detached_) {
      lock.unlock();
      cache_.release(ptr, bytes);
      return;
    }
    free_[bytes].push_back(ptr);
  }

  // The graph is gone (its replays have finished): every free block returns to the caching allocator, and
  // blocks released later go there directly.
  void detach() {
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      detached_ = true;
      blocks.swap(free_);
    }
    for (auto& [size, list] : blocks) {
      for (void* p : list) cache_.release(p, size);
    }
  }

 private:
  CachingAllocator& cache_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  bool detached_ = false;
};

}  // namespace rbee::gpu
