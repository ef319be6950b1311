// Force-included (-include) into every GPU source the emulator compiles as C++: CUDA's keywords and built-in
// variables in terms of emu_runtime.h. See tools/gpu_emu/README.md.
#pragma once

#include <math.h>  // the float overloads (expf, exp(float), ...) in the global namespace, as device code has them

#include <cstdint>
#include <cstring>

#include "emu_runtime.h"

// Marks a translation unit compiled as kernel source (the .cu files), for headers that hold device code only.
#define RBEE_GPU_EMU_KERNELS 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// A block's threads run one block at a time on one OS thread: a static local is the block's shared array
// (thread_local: launches from several OS threads, e.g. tensor-parallel ranks, run at the same time).
#define __shared__ static thread_local

#define threadIdx (::emu::thread_index())
#define blockIdx (::emu::block_index())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
inline void __syncthreads() { ::emu::sync_threads(); }

#define __restrict__ __restrict

using dim3 = ::emu::Dim3;
// CUDA's vector types (with their alignment) and constructors.
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// CUDA's global min/max overloads.
template <class A, class B>
inline auto min(A a, B b) {
  return b < a ? b : a;
}
template <class A, class B>
inline auto max(A a, B b) {
  return a < b ? b : a;
}

inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline long long __double_as_longlong(double d) {
  long long v;
  std::memcpy(&v, &d, 8);
  return v;
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
