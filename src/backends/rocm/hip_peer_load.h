// The peer-access loads, stores and flags on HIP (contract: backends/gpu/peer_load.h): volatile accesses, which
// the compiler neither caches in registers nor merges, and the clang atomic built-ins at system scope for flags.
#pragma once

#include <cstdint>

namespace rbee::gpu {

__device__ __forceinline__ float4 load_peer_f4(const float4* p) {
  const volatile float* v = reinterpret_cast<const volatile float*>(p);
  return make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void store_peer_u64x2(uint64_t* p, uint64_t a, uint64_t b) {
  volatile uint64_t* v = p;
  v[0] = a;
  v[1] = b;
}

__device__ __forceinline__ void load_peer_u64x2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  const volatile uint64_t* v = p;
  a = v[0];
  b = v[1];
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}

}  // namespace rbee::gpu
