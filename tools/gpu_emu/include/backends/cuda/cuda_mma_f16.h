// The emulator's 16-bit matrix tiles (shadows src/backends/cuda/cuda_mma_f16.h): the scalar FMA
// implementation of the contract in backends/gpu/platform.h, with its own accumulator layout (not NVIDIA's),
// so the conformance cases run on the emulator also check that kernels depend on no vendor's fragment layout.
#pragma once

// Device code: only in the kernel sources (prelude.h), not in host-only files such as emu_blas.cpp.
#if defined(RBEE_GPU_EMU_KERNELS)
#include "backends/gpu/fma_mma_f16.h"
#endif
