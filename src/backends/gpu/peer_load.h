// Loads of values that a peer GPU stored into this device's memory (the collectives' inboxes), read after an
// acquire (the peer's flag seen, then threadfence_system): they must come from where the peer's stores landed,
// never from a line the reading SM cached earlier.
//   float4 load_peer_f4(const float4* p)   16 bytes, p 16-byte aligned
// CUDA: one 16-byte load through L2 (ld.global.cg); HIP: volatile 4-byte loads.
// Words that carry their own validity (the ll all-reduce: value bits | round << 32 in one 8-byte word), moved two at
// a time; each 8-byte word is observed whole (the PTX memory model treats a vector access as one access per
// element, a scalar of at most 64 bits, in no particular order: the pair is not atomic, each word is):
//   void store_peer_u64x2(uint64_t* p, uint64_t a, uint64_t b)   p[0] = a, p[1] = b; p 16-byte aligned
//   void load_peer_u64x2(const uint64_t* p, uint64_t& a, uint64_t& b)   a = p[0], b = p[1], read from memory each call
//   CUDA: one st / ld.volatile.global.v2.u64 (volatile: relaxed at system scope); HIP: two volatile 8-byte accesses.
// Flags with release / acquire order at system scope (the flag all-reduce with RBEE_ALLREDUCE_FENCE=release):
//   void store_release_sys(uint32_t* p, uint32_t v)   every store this thread's block made before a barrier that
//       precedes this call is visible to a thread whose acquire load reads v (the release is cumulative)
//   uint32_t load_acquire_sys(const uint32_t* p)
//   CUDA: st.release.sys / ld.acquire.sys; HIP: __hip_atomic_store / __hip_atomic_load at system scope.
// Only the collectives include this (not platform.h), so a change here recompiles nothing else.
#pragma once

#include "backends/gpu/platform.h"

#if defined(RBEE_GPU_HIP)
#include "backends/rocm/hip_peer_load.h"
#else
#include "backends/cuda/cuda_peer_load.h"
#endif
