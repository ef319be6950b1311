// 16-byte vector access for the memory-bound kernels (rms_norm, add_rms_norm, swiglu, rope): V consecutive
// elements moved with one 128-bit load or store when V * sizeof(T) == 16, element by element otherwise (V = 1
// is the fallback for unaligned or odd-sized data). The host picks V with vec16_ok().
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/gpu/kernels/common.cuh"

namespace rbee::gpu {

// Elements of T in 16 bytes.
template <class T>
inline constexpr int kVec16 = (int)(16 / sizeof(T));

// Whether every pointer is 16-byte aligned (null pointers are ignored) and every count a multiple of `v`.
inline bool vec16_ok(std::initializer_list<const void*> ptrs, std::initializer_list<int64_t> counts, int v) {
  for (const void* p : ptrs) {
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  for (const int64_t c : counts) {
    if (c % v != 0) return false;
  }
  return true;
}

#if defined(__CUDACC__) || defined(__HIPCC__)
struct alignas(16) Bytes16 {
  uint32_t w[4];
};

// out[k] = p[k] for k < V, in the compute type. p is 16-byte aligned when V * sizeof(T) == 16.
template <class T, int V>
__device__ inline void load_vec(const T* p, compute_t<T> (&out)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    const Bytes16 raw = *reinterpret_cast<const Bytes16*>(p);
    T t[V];
    memcpy(t, &raw, 16);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = load(&t[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = load(p + k);
  }
}

// p[k] = v[k] for k < V, rounded to T. p is 16-byte aligned when V * sizeof(T) == 16.
template <class T, int V>
__device__ inline void store_vec(T* p, const compute_t<T> (&v)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    T t[V];
#pragma unroll
    for (int k = 0; k < V; ++k) store(&t[k], v[k]);
    Bytes16 raw;
    memcpy(&raw, t, 16);
    *reinterpret_cast<Bytes16*>(p) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) store(p + k, v[k]);
  }
}

// Sum over each aligned group of `group` consecutive threads (a power of two; blockDim.x a multiple of it and
// of the warp size, at most 32 warps): shuffles inside a warp, then shared memory across the group's warps.
// Every thread of the group gets the same value, added in a fixed order. All threads of the block must call it.
template <class C>
__device__ inline C group_sum(C v, C* scratch, int group) {
  constexpr int kW = RBEE_DEVICE_WARP_SIZE;
  const int width = group < kW ? group : kW;
  for (int m = width / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
  if (group <= kW) return v;
  const int warp = threadIdx.x / kW;
  __syncthreads();  // earlier readers of scratch are done
  if (threadIdx.x % kW == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = group / kW, first = (int)(threadIdx.x / group) * warps;
  C s = 0;
  for (int k = 0; k < warps; ++k) s += scratch[first + k];
  return s;
}
#endif

}  // namespace rbee::gpu
