// The peer-access loads, stores and flags on CUDA (contract: backends/gpu/peer_load.h). load_peer_f4: ld.global.cg,
// served by L2, where a peer's stores through NVLink / PCIe land; L1 is bypassed, so no stale line of an earlier
// round is read. The word pairs and flags are inline PTX (sm_70+: the scoped memory model).
#pragma once

#include <cstdint>

namespace rbee::gpu {

__device__ __forceinline__ float4 load_peer_f4(const float4* p) { return __ldcg(p); }

__device__ __forceinline__ void store_peer_u64x2(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ void load_peer_u64x2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace rbee::gpu
