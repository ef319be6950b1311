// Spreading an L2 prefetch over the threads of a grid (prefetch_l2 from the platform header: a hint, no registers,
// nothing waits for it).
#pragma once

#include <cstdint>

#include "backends/gpu/platform.h"

namespace rbee::gpu {

// Bytes one prefetch instruction asks for.
inline constexpr int64_t kL2PrefetchChunk = 16 << 10;

// This thread's number in the grid, block by block (thread t of block b is b * blockDim + t): a few requests all
// land on the first blocks.
__device__ __forceinline__ int64_t grid_thread_blocked() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
// The same with the blocks interleaved (thread t of block b is t * gridDim + b): consecutive requests go to
// different blocks, so a few thousand requests are spread over every multiprocessor.
__device__ __forceinline__ int64_t grid_thread_interleaved() {
  return (int64_t)threadIdx.x * gridDim.x + blockIdx.x;
}

// The threads of the grid ask for [p, p + bytes) (its 16-byte aligned interior) in L2, kL2PrefetchChunk bytes per
// request, the thread numbered `thread` (grid_thread_blocked or grid_thread_interleaved) taking chunks thread,
// thread + threads, ... Nothing when bytes <= 0.
__device__ __forceinline__ void prefetch_l2_span(const void* p, int64_t bytes, int64_t thread) {
  if (bytes <= 0) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + (uintptr_t)bytes) & ~uintptr_t(15);
  const uintptr_t threads = (uintptr_t)gridDim.x * blockDim.x;
  for (uintptr_t at = begin + (uintptr_t)thread * kL2PrefetchChunk; at < end; at += threads * kL2PrefetchChunk) {
    const uintptr_t len = end - at < (uintptr_t)kL2PrefetchChunk ? end - at : (uintptr_t)kL2PrefetchChunk;
    prefetch_l2(reinterpret_cast<const void*>(at), (uint32_t)len);
  }
}

// The first `take` bytes of each of `rows` rows of row_bytes bytes from p (a matrix's leading columns), one row per
// thread at a time (numbered as in prefetch_l2_span), kL2PrefetchChunk bytes per request: a head start for every
// row's reader, where prefetch_l2_span helps the readers of the first rows only. Nothing when rows or take <= 0.
__device__ __forceinline__ void prefetch_l2_row_heads(const void* p, int64_t rows, int64_t row_bytes, int64_t take,
                                                      int64_t thread) {
  if (rows <= 0 || take <= 0) return;
  const int64_t threads = (int64_t)gridDim.x * blockDim.x;
  for (int64_t r = thread; r < rows; r += threads) {
    const uintptr_t row = reinterpret_cast<uintptr_t>(p) + (uintptr_t)(r * row_bytes);
    const uintptr_t begin = (row + 15) & ~uintptr_t(15);
    const uintptr_t end = (row + (uintptr_t)take) & ~uintptr_t(15);
    for (uintptr_t at = begin; at < end; at += kL2PrefetchChunk) {
      const uintptr_t len = end - at < (uintptr_t)kL2PrefetchChunk ? end - at : (uintptr_t)kL2PrefetchChunk;
      prefetch_l2(reinterpret_cast<const void*>(at), (uint32_t)len);
    }
  }
}

}  // namespace rbee::gpu
