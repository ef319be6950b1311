// Batch-invariant mode of the kernels (RBEE_BATCH_INVARIANT=1; `--batch-invariant` on rbee run / bench / chat and
// llm-worker-rbee sets it for the process). docs/DESIGN.md, "Batch invariance", states the contract: with the mode on,
// the result of every row of an LLM step's ops is independent of how many rows share the launch (M), of the row's
// position among them, of the split between cached and new tokens and of speculative verification vs decode.
// How the dispatch gets there (each op's per-row reduction order fixed, whatever the launch):
//  - qmatmul / norm_qmatmul / swiglu_qmatmul, block types: the matvec kernels for every M (launches of up to
//    kQuantMatvecMaxRows rows; their per-row order does not depend on M), never MMQ or its split-K; the Q4_K / Q5_K
//    item-pair variant (RBEE_MATVEC_PAIRS, only some M) off.
//  - the same with F32 / F16 / BF16 weights: the gemv kernels for every M, never the vendor BLAS GEMM.
//  - paged_attention: one kernel configuration for every launch (the decode one of the tensor-core kernel, chosen
//    from the head size and the device alone), no split of the key range (one pass over keys 0..pos in fixed key
//    tiles), and a sliding window's first key tile aligned to the tile size, so a row visits the same key tiles in
//    the same order in a decode step, a prefill chunk over a cached prefix, a speculative verify or a batch.
// The CPU backend is batch-invariant by construction except for one order it copies from llama.cpp: paged attention
// over an F32 cache sums P.V in 8 lanes for a chunk of >= 2 queries and in 32 for one (cpu_paged_attention.cpp);
// with the mode on it takes the 32-lane order for every chunk. Speed on GPUs: prompts and large batches lose
// MMQ / the GEMM (several times slower prefill), long single-stream decode loses split-K attention.
#pragma once

#include <cstdlib>
#include <string_view>

#include "rbee/core/env.h"

namespace rbee {

// Whether the mode is on: RBEE_BATCH_INVARIANT set to anything but "" or "0". Read at each call (a few per layer),
// so a process (or a test) can switch it between launches.
inline bool batch_invariant() {
  return env::flag_or("RBEE_BATCH_INVARIANT", false);
}

}  // namespace rbee
