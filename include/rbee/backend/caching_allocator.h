// CachingAllocator: keeps freed blocks for reuse so that steady-state loops (a decode step) never call the
// device's raw allocator. Vendor-neutral: a backend supplies the raw alloc/free functions.
//
// Sizes are rounded up to a bucket (4 buckets per power of two above 4 KiB, so at most 25% waste); a freed
// block waits in its bucket's free list. When the raw allocator fails, the cache is emptied and the
// allocation retried once; if it fails again, OutOfMemory is thrown with the sizes involved.
//
// Fault injection (tests and soak runs, docs/RELIABILITY.md), read from the environment at construction:
//   RBEE_FAULT_ALLOC_LIMIT=<bytes>   the raw allocator fails beyond that many bytes in use (a smaller device)
//   RBEE_FAULT_ALLOC_SWITCH=<path>   while <path> exists, every allocation fails (a device that fills up mid-run)
// Both take effect only on devices whose name contains RBEE_FAULT_ALLOC_DEVICE when that is set.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rbee/core/buffer.h"
#include "rbee/core/device.h"

namespace rbee {

class CachingAllocator final : public BufferReleaser {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr on failure
  using RawFree = std::function<void(void*)>;

  CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator() override;

  // Returns a block of at least `bytes` bytes (bytes may be 0). Throws OutOfMemory.
  void* allocate(size_t bytes, size_t* rounded_bytes);
  void release(void* ptr, size_t bytes) override;
  // A block of exactly `bytes` bytes (rounded up to 256) straight from the raw allocator, for long-lived memory
  // (weights, KV cache) where the size buckets would waste up to a quarter; its Buffer must be released through
  // exact_releaser(), which hands it back to the raw allocator at once (never into the cache). Counted in
  // in_use_bytes and exact_bytes; the fault limit applies. Throws OutOfMemory.
  void* allocate_exact(size_t bytes, size_t* rounded_bytes);
  BufferReleaser* exact_releaser() { return &exact_releaser_; }
  // Returns every cached block to the raw allocator.
  void empty_cache();
  AllocatorStats stats() const;

  static size_t round_size(size_t bytes);
  // Size allocate_exact() takes for `bytes`.
  static size_t exact_size(size_t bytes) { return (std::max<size_t>(bytes, 1) + 255) / 256 * 256; }

 private:
  struct ExactReleaser final : BufferReleaser {
    CachingAllocator* owner = nullptr;
    void release(void* ptr, size_t bytes) override;
  };
  // Raw allocation of `size` bytes under the fault limit, emptying the cache and retrying once on failure.
  // Caller holds mutex_. Returns nullptr when that fails too.
  void* raw_with_retry(size_t size);
  std::string device_name_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_lists_;
  AllocatorStats stats_;
  int64_t fault_limit_ = -1;  // RBEE_FAULT_ALLOC_LIMIT, -1: none
  std::string fault_switch_;  // RBEE_FAULT_ALLOC_SWITCH, "": none
  ExactReleaser exact_releaser_;
};

}  // namespace rbee
