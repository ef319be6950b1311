// The peer-access loads, stores and flags in the emulator (contract: backends/gpu/peer_load.h): plain host memory,
// read and written through volatile; the flags through the compiler's atomic built-ins.
#pragma once

#include <cstdint>

namespace rbee::gpu {

inline float4 load_peer_f4(const float4* p) {
  const volatile float* v = reinterpret_cast<const volatile float*>(p);
  return make_float4(v[0], v[1], v[2], v[3]);
}

inline void store_peer_u64x2(uint64_t* p, uint64_t a, uint64_t b) {
  volatile uint64_t* v = p;
  v[0] = a;
  v[1] = b;
}

inline void load_peer_u64x2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  const volatile uint64_t* v = p;
  a = v[0];
  b = v[1];
}

inline void store_release_sys(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

inline uint32_t load_acquire_sys(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

}  // namespace rbee::gpu
