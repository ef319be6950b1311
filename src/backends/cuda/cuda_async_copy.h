// CUDA's asynchronous global -> shared memory copies (re-exported by backends/gpu/platform.h): cp.async, sm_80 and
// later. A kernel issues the next step's copies, computes on the current step's shared memory meanwhile, then waits.
//
// Contract (all vendors; the shared kernels rely on nothing else):
//   copy_async_16(dst, src, valid): dst in shared memory, src in global memory, both 16-byte aligned. Copies 16
//     bytes from src to dst, or, when !valid, writes 16 zero bytes to dst and reads nothing. Until this thread's
//     copy_async_wait_all returns, nobody may read or write dst (a vendor may write it at any point in between).
//   copy_async_16_l1(dst, src, valid): copy_async_16 whose source may also be kept in the SM's L1 cache (data the
//     same block reads again a few steps later, e.g. the overlapping input windows of a convolution's taps).
//   copy_async_commit(): closes the group of this thread's copies issued since the last commit (call it after
//     the copies of a step).
//   copy_async_wait_all(): returns once every copy this thread issued has landed; a block barrier after it
//     makes them visible to the whole block.
//   copy_async_wait_pending<N>(): returns once every copy of this thread's committed groups except the N most
//     recent ones has landed (multi-stage pipelines: stages issued ahead stay in flight); a block barrier after
//     it makes them visible to the whole block. N = 0 is copy_async_wait_all for committed groups.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
namespace rbee::gpu {

__device__ __forceinline__ void copy_async_16(void* dst, const void* src, bool valid) {
  const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  // src-size 0: the 16 bytes are zero-filled and src is not read.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_async_16_l1(void* dst, const void* src, bool valid) {
  const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void copy_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace rbee::gpu
#endif  // __CUDACC__
