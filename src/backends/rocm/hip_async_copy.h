// HIP's side of the asynchronous global -> shared copy contract stated in backends/cuda/cuda_async_copy.h (re-exported
// by backends/gpu/platform.h). The gfx9 / RDNA2 targets Debian's hipcc 5.2 builds have no asynchronous copy into
// LDS that this code uses: the copy is a plain 16-byte load and store, complete when copy_async_16 returns.
#pragma once

#include <cstdint>

#if defined(__HIPCC__)
namespace rbee::gpu {

__device__ __forceinline__ void copy_async_16(void* dst, const void* src, bool valid) {
  *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void copy_async_16_l1(void* dst, const void* src, bool valid) {
  copy_async_16(dst, src, valid);
}
__device__ __forceinline__ void copy_async_commit() {}
__device__ __forceinline__ void copy_async_wait_all() {}
template <int N>
__device__ __forceinline__ void copy_async_wait_pending() {}

}  // namespace rbee::gpu
#endif  // __HIPCC__
