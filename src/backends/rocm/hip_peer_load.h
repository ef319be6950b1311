// load_peer_f4 on HIP (contract: backends/gpu/peer_load.h): four volatile loads, which the compiler neither
// caches in registers nor merges with earlier loads.
#pragma once

namespace rbee::gpu {

__device__ __forceinline__ float4 load_peer_f4(const float4* p) {
  const volatile float* v = reinterpret_cast<const volatile float*>(p);
  return make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace rbee::gpu
