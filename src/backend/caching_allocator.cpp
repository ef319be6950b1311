#include "rbee/backend/caching_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"

namespace rbee {

CachingAllocator::CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free)
    : device_name_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {
  exact_releaser_.owner = this;
  const std::optional<std::string_view> only = env::text("RBEE_FAULT_ALLOC_DEVICE");
  if (only && device_name_.find(*only) == std::string::npos) return;
  if (const std::optional<int64_t> limit = env::integer("RBEE_FAULT_ALLOC_LIMIT", 0)) {
    fault_limit_ = *limit;
    log::warn("event=fault_injection device=\"{}\" alloc_limit_bytes={}", device_name_, *limit);
  }
  if (const std::optional<std::string_view> path = env::text("RBEE_FAULT_ALLOC_SWITCH")) {
    fault_switch_ = std::string(*path);
    log::warn("event=fault_injection device=\"{}\" alloc_switch=\"{}\"", device_name_, fault_switch_);
  }
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kMin = 4096;
  if (bytes <= kMin) return bytes <= 256 ? 256 : (bytes + 255) / 256 * 256;
  // 4 buckets per power of two: step = 2^(floor(log2(bytes)) - 2)
  const int log2 = 63 - std::countl_zero((uint64_t)bytes);
  const size_t step = (size_t)1 << (log2 - 2);
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes, size_t* rounded_bytes) {
  const size_t size = round_size(bytes);
  *rounded_bytes = size;
  RBEE_CHECK_CODE(fault_switch_.empty() || ::access(fault_switch_.c_str(), F_OK) != 0, ErrorCode::OutOfMemory,
                  "out of memory on {}: could not allocate {} bytes (injected: {} exists)", device_name_, size,
                  fault_switch_);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_lists_.find(size);
  if (it != free_lists_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= (int64_t)size;
    stats_.in_use_bytes += (int64_t)size;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    return p;
  }
  void* p = raw_with_retry(size);
  RBEE_CHECK_CODE(p != nullptr, ErrorCode::OutOfMemory,
                  "out of memory on {}: could not allocate {} bytes ({} bytes already in use)", device_name_, size,
                  stats_.in_use_bytes);
  ++stats_.raw_allocations;
  stats_.in_use_bytes += (int64_t)size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

void* CachingAllocator::raw_with_retry(size_t size) {
  // The injected limit counts what the raw allocator holds (in use + cached), as a real device would.
  auto raw = [&]() -> void* {
    if (fault_limit_ >= 0 && stats_.in_use_bytes + stats_.cached_bytes + (int64_t)size > fault_limit_) return nullptr;
    return raw_alloc_(size);
  };
  void* p = raw();
  if (!p && stats_.cached_bytes > 0) {
    for (auto& [sz, list] : free_lists_) {
      for (void* q : list) raw_free_(q);
      list.clear();
    }
    stats_.cached_bytes = 0;
    p = raw();
  }
  return p;
}

void* CachingAllocator::allocate_exact(size_t bytes, size_t* rounded_bytes) {
  const size_t size = exact_size(bytes);
  *rounded_bytes = size;
  RBEE_CHECK_CODE(fault_switch_.empty() || ::access(fault_switch_.c_str(), F_OK) != 0, ErrorCode::OutOfMemory,
                  "out of memory on {}: could not allocate {} bytes (injected: {} exists)", device_name_, size,
                  fault_switch_);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = raw_with_retry(size);
  RBEE_CHECK_CODE(p != nullptr, ErrorCode::OutOfMemory,
                  "out of memory on {}: could not allocate {} bytes ({} bytes already in use)", device_name_, size,
                  stats_.in_use_bytes);
  ++stats_.raw_allocations;
  stats_.in_use_bytes += (int64_t)size;
  stats_.exact_bytes += (int64_t)size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

void CachingAllocator::ExactReleaser::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(owner->mutex_);
  owner->raw_free_(ptr);
  owner->stats_.in_use_bytes -= (int64_t)bytes;
  owner->stats_.exact_bytes -= (int64_t)bytes;
}

void CachingAllocator::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  free_lists_[bytes].push_back(ptr);
  stats_.in_use_bytes -= (int64_t)bytes;
  stats_.cached_bytes += (int64_t)bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, list] : free_lists_) {
    for (void* p : list) raw_free_(p);
    list.clear();
  }
  stats_.cached_bytes = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatorStats s = stats_;
  s.limit_bytes = fault_limit_;
  return s;
}

}  // namespace rbee
