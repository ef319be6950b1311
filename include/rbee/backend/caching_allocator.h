// CachingAllocator: keeps freed blocks for reuse so that steady-state loops (a decode step) never call the
// device's raw allocator. Vendor-neutral: a backend supplies the raw alloc/free functions.
//
// Sizes are rounded up to a bucket (4 buckets per power of two above 4 KiB, so at most 25% waste); a freed
// block waits in its bucket's free list. When the raw allocator fails, the cache is emptied and the
// allocation retried once; if it fails again, OutOfMemory is thrown with the sizes involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rbee/backend/buffer.h"

namespace rbee {

struct AllocatorStats {
  int64_t in_use_bytes = 0;     // handed out and not yet released
  int64_t cached_bytes = 0;     // released and kept for reuse
  int64_t peak_in_use_bytes = 0;
  int64_t raw_allocations = 0;  // calls that reached the raw allocator
};

class CachingAllocator final : public BufferReleaser {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr on failure
  using RawFree = std::function<void(void*)>;

  CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator() override;

  // Returns a block of at least `bytes` bytes (bytes may be 0). Throws OutOfMemory.
  void* allocate(size_t bytes, size_t* rounded_bytes);
  void release(void* ptr, size_t bytes) override;
  // Returns every cached block to the raw allocator.
  void empty_cache();
  AllocatorStats stats() const;

  static size_t round_size(size_t bytes);

 private:
  std::string device_name_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_lists_;
  AllocatorStats stats_;
};

}  // namespace rbee
