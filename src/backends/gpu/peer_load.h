// Loads of values that a peer GPU stored into this device's memory (the collectives' inboxes), read after an
// acquire (the peer's flag seen, then threadfence_system): they must come from where the peer's stores landed,
// never from a line the reading SM cached earlier.
//   float4 load_peer_f4(const float4* p)   16 bytes, p 16-byte aligned
// CUDA: one 16-byte load through L2 (ld.global.cg); HIP: volatile 4-byte loads. Only the collectives include
// this (not platform.h), so a change here recompiles nothing else.
#pragma once

#include "backends/gpu/platform.h"

#if defined(RBEE_GPU_HIP)
#include "backends/rocm/hip_peer_load.h"
#else
#include "backends/cuda/cuda_peer_load.h"
#endif
