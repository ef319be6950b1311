// load_peer_f4 in the emulator (contract: backends/gpu/peer_load.h): plain host memory, read through volatile.
#pragma once

namespace rbee::gpu {

inline float4 load_peer_f4(const float4* p) {
  const volatile float* v = reinterpret_cast<const volatile float*>(p);
  return make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace rbee::gpu
