// Device helpers shared by the reduce, index, matmul, nn and conv kernel families (on top of common.cuh):
// dynamic shared memory of any type, reductions over aligned groups of threads of any size (through shared
// memory, so they work for any accumulator type and any warp width), and small host-side launch helpers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/common.cuh"

namespace rbee::gpu {

// ---- host helpers ----
// Smallest power of two >= n (n >= 1).
inline int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
RBEE_HOST_DEVICE inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Threads that cooperate on one row of n elements, as a power of two in [32, 256]: about `per_thread` elements
// each, so short rows do not leave most of a 256-thread block idle.
inline int row_group_size(int64_t n, int64_t per_thread) {
  return (int)std::clamp<int64_t>(pow2_ceil(std::max<int64_t>(1, ceil_div(n, per_thread))), 32, 256);
}

// Blocks for a grid-stride loop over `items` work items handled `per_block` at a time.
inline unsigned blocks_for(int64_t items, int64_t per_block) {
  return (unsigned)std::clamp<int64_t>(ceil_div(items, per_block), 1, 65535LL * 16);
}

#if defined(__CUDACC__) || defined(__HIPCC__)
// The block's dynamic shared memory as an array of T (16-byte aligned).
template <class T>
__device__ inline T* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char rbee_dynamic_smem[];
  return reinterpret_cast<T*>(rbee_dynamic_smem);
}

// Reduces v over each aligned group of `group` consecutive threads (group a power of two dividing blockDim.x)
// with the associative `op`; every thread of the group gets the result. All threads of the block must call it
// (it synchronizes the block). `scratch` holds blockDim.x values of T.
template <class T, class Op>
__device__ inline T group_reduce(T v, Op op, T* scratch, int group) {
  const int tid = threadIdx.x, lane = tid & (group - 1);
  scratch[tid] = v;
  __syncthreads();
  for (int s = group >> 1; s > 0; s >>= 1) {
    if (lane < s) scratch[tid] = op(scratch[tid], scratch[tid + s]);
    __syncthreads();
  }
  const T r = scratch[tid - lane];
  __syncthreads();
  return r;
}

template <class C>
__device__ inline bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// exp in the compute type at full precision (never the fast intrinsics: results must match the CPU's).
__device__ inline float exp_c(float v) { return expf(v); }
__device__ inline double exp_c(double v) { return exp(v); }

// Quiet NaN of the compute type.
template <class C>
__device__ inline C quiet_nan() {
  if constexpr (std::is_same_v<C, double>) return __longlong_as_double(0x7ff8000000000000LL);
  else return __int_as_float(0x7fc00000);
}
#endif

}  // namespace rbee::gpu
