// Helpers shared by the CPU neural-network kernels (cpu_norm.cpp, cpu_rope.cpp, cpu_attention.cpp, cpu_nn.cpp):
// the type each storage dtype computes in, f16/bf16 <-> f32 row conversion, per-thread scratch, row splitting.
//
// f16 and bf16 rows are widened to f32 and run through the f32 SIMD kernels; f32 and f64 compute in their own
// type (f64 with plain loops, it is the reference-grade path).
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_common.h"

namespace rbee::cpu {

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// The type a kernel computes in for storage type T: double for f64, float otherwise.
template <class T>
using nn_compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Exact widening with SIMD (cpu_widen.cpp).
void widen_f16(const f16* src, float* dst, int64_t n);
void widen_bf16(const bf16* src, float* dst, int64_t n);

// dst[i] = src[i] in the compute type.
template <class T>
inline void load_row(const T* src, nn_compute_t<T>* dst, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) {
    widen_f16(src, dst, n);
  } else if constexpr (std::is_same_v<T, bf16>) {
    widen_bf16(src, dst, n);
  } else {
    std::memcpy(dst, src, (size_t)n * sizeof(T));
  }
}

// dst[i] = src[i] stored as T (round to nearest even for f16/bf16).
template <class T>
inline void store_row(const nn_compute_t<T>* src, T* dst, int64_t n) {
  if constexpr (is_half_v<T>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
  } else {
    std::memcpy(dst, src, (size_t)n * sizeof(T));
  }
}

// A 1-D tensor of T (contiguous, on the host) widened to its compute type; empty when t is null.
template <class T>
std::vector<nn_compute_t<T>> widened_vector(const Tensor* t) {
  std::vector<nn_compute_t<T>> out;
  if (!t) return out;
  out.resize((size_t)t->numel());
  load_row(static_cast<const T*>(t->data()), out.data(), t->numel());
  return out;
}

// Per-thread scratch: slot `slot` holds at least n elements of C until this thread asks for that slot again.
// Kernels never nest, so a kernel owns the slots of its thread while it runs.
inline constexpr int kScratchSlots = 8;
template <class C>
C* scratch(int slot, size_t n) {
  thread_local std::vector<C> buffers[kScratchSlots];
  std::vector<C>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Calls fn(begin, end) over [0, rows) on the global pool in chunks of about `grain_elements` elements
// (rows of `row_elements` each); small jobs run on the calling thread.
template <class Fn>
void parallel_rows(int64_t rows, int64_t row_elements, Fn&& fn, int64_t grain_elements = 1 << 14) {
  if (rows <= 0) return;
  const int64_t per_row = std::max<int64_t>(row_elements, 1);
  if (rows * per_row <= grain_elements || rows == 1) {
    fn((int64_t)0, rows);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, grain_elements / per_row);
  ThreadPool::global().parallel_for(rows, grain, fn);
}

}  // namespace rbee::cpu
