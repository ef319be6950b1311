// The L2 prefetch the collectives' kernels issue first (L2Hint, collective.h), by the whole grid, the requests spread
// over every block (issued by the first blocks alone, the first-rows layout of 24 MiB at each 1 MiB all-reduce made
// 7B F16 64-stream decoding over two H100s 20% slower instead of faster: docs/perf-notes/multi-device.md, seventh
// session).
#pragma once

#include "backends/gpu/collective.h"
#include "backends/gpu/kernels/l2_prefetch.cuh"

namespace rbee::gpu {

__device__ __forceinline__ void issue_prefetch(const L2Hint& h) {
  if (h.rows > 0) prefetch_l2_row_heads(h.p, h.rows, h.row_bytes, h.bytes / h.rows, grid_thread_interleaved());
  else prefetch_l2_span(h.p, h.bytes, grid_thread_interleaved());
}

}  // namespace rbee::gpu
