// load_peer_f4 on CUDA (contract: backends/gpu/peer_load.h): ld.global.cg, served by L2, where a peer's stores
// through NVLink / PCIe land; L1 is bypassed, so no stale line of an earlier round is read.
#pragma once

namespace rbee::gpu {

__device__ __forceinline__ float4 load_peer_f4(const float4* p) { return __ldcg(p); }

}  // namespace rbee::gpu
