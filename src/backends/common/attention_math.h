// The reference semantics of the attention op (op_table.def; AttentionParams in rbee/backend/op_kinds.h), written
// once for the CPU backend (backends/cpu/cpu_attention.cpp, cpu_attention_blocks.cpp) and the GPU kernels
// (backends/gpu/kernels/attention.cu): the call's sizes, which keys a query sees (causal mask aligned to the end
// of the keys, sliding window), and the soft cap of the scaled scores.
//
// Shapes: q [batch, q_heads, tq, dim], k [batch, kv_heads, tk, dim], v [batch, kv_heads, tk, dim_v],
// out [batch, q_heads, tq, dim_v]; q_heads is a multiple of kv_heads (grouped-query attention: `group` query heads
// share one kv head).
#pragma once

#include <cmath>
#include <cstdint>

#include "rbee/core/error.h"
#include "rbee/core/host_device.h"
#include "rbee/core/tensor.h"

namespace rbee::attention {

struct AttentionShape {
  int64_t batch, q_heads, kv_heads, group, tq, tk, dim, dim_v;
  int64_t rows;  // rows per (batch, kv head) = group * tq
};

// The sizes of q, k, v (shapes above; the op front-end checked them).
inline AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionShape s{};
  s.batch = q.dim(0);
  s.q_heads = q.dim(1);
  s.tq = q.dim(2);
  s.dim = q.dim(3);
  s.kv_heads = k.dim(1);
  s.tk = k.dim(2);
  s.dim_v = v.dim(3);
  RBEE_ASSERT(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0, "attention: {} query heads over {} kv heads",
              s.q_heads, s.kv_heads);
  s.group = s.q_heads / s.kv_heads;
  s.rows = s.group * s.tq;
  return s;
}

// Keys [lo, hi) that query i (< tq) may see: the queries are the last tq of tk positions; causal: keys up to the
// query's position; window > 0: only the last `window` positions up to it. lo <= hi; an empty range sees nothing.
RBEE_HOST_DEVICE inline void visible_keys(int64_t tq, int64_t tk, bool causal, int window, int64_t i, int64_t& lo,
                                          int64_t& hi) {
  const int64_t pos = tk - tq + i;
  hi = causal ? (pos + 1 < 0 ? 0 : (pos + 1 > tk ? tk : pos + 1)) : tk;
  lo = 0;
  if (window > 0) {
    lo = pos - window + 1;
    lo = lo < 0 ? 0 : (lo > tk ? tk : lo);
  }
  if (lo > hi) lo = hi;
}

// A scaled score after the soft cap: cap * tanh(s / cap) when cap > 0, else s (C: float or double).
template <class C>
RBEE_HOST_DEVICE inline C soft_cap(C s, C cap) {
  using std::tanh;  // float math for float, double for double, on the host and on the device
  return cap > C(0) ? cap * tanh(s / cap) : s;
}

}  // namespace rbee::attention
