// Spreading an L2 prefetch of one byte range over the threads of a grid (prefetch_l2 from the platform header:
// a hint, no registers, nothing waits for it).
#pragma once

#include <cstdint>

#include "backends/gpu/platform.h"

namespace rbee::gpu {

// Bytes one prefetch instruction asks for.
inline constexpr int64_t kL2PrefetchChunk = 16 << 10;

// The threads of the grid ask for [p, p + bytes) (its 16-byte aligned interior) in L2, kL2PrefetchChunk bytes per
// request, thread t of the grid taking chunks t, t + threads, ... Nothing when bytes <= 0.
__device__ __forceinline__ void prefetch_l2_span(const void* p, int64_t bytes) {
  if (bytes <= 0) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + (uintptr_t)bytes) & ~uintptr_t(15);
  const uintptr_t thread = (uintptr_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uintptr_t threads = (uintptr_t)gridDim.x * blockDim.x;
  for (uintptr_t at = begin + thread * kL2PrefetchChunk; at < end; at += threads * kL2PrefetchChunk) {
    const uintptr_t len = end - at < (uintptr_t)kL2PrefetchChunk ? end - at : (uintptr_t)kL2PrefetchChunk;
    prefetch_l2(reinterpret_cast<const void*>(at), (uint32_t)len);
  }
}

// The first `take` bytes of each of `rows` rows of row_bytes bytes from p (a matrix's leading columns), one row per
// thread of the grid at a time, kL2PrefetchChunk bytes per request: a head start for every row's reader, where
// prefetch_l2_span helps the readers of the first rows only. Nothing when rows or take <= 0.
__device__ __forceinline__ void prefetch_l2_row_heads(const void* p, int64_t rows, int64_t row_bytes, int64_t take) {
  if (rows <= 0 || take <= 0) return;
  const int64_t thread = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
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
