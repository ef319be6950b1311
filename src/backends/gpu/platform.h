// The GPU platform layer: our own names (rbee::gpu::Stream, memcpy_async, shfl_xor, dot4_i8, mma_i8_k32, ...)
// over CUDA or HIP. The shared kernels in backends/gpu/ include only this header; the vendor headers stay in
// backends/cuda/ and backends/rocm/. RBEE_GPU_HIP selects HIP (set by the rocm build).
#pragma once

#include <cstdint>

#if defined(RBEE_GPU_HIP)
#include "backends/rocm/hip_platform.h"
#include "backends/rocm/hip_mma_i8.h"     // warp-level int8 tile product (contract: backends/cuda/cuda_mma_i8.h)
#include "backends/rocm/hip_async_copy.h"  // global -> shared copies (contract: backends/cuda/cuda_async_copy.h)
#include "backends/rocm/hip_mma_f16.h"     // warp-level 16-bit float tile product (contract below)
#else
#include "backends/cuda/cuda_platform.h"
#include "backends/cuda/cuda_mma_i8.h"      // warp-level int8 tile product and its contract
#include "backends/cuda/cuda_async_copy.h"  // asynchronous global -> shared copies and their contract
#include "backends/cuda/cuda_mma_f16.h"     // warp-level 16-bit float tile product (contract below)
#endif

// ---- 16-bit matrix tiles on tensor cores / matrix cores (device code; *_mma_f16.h) ----
// One warp computes C[16 x 16] += A[16 x 16] . B[16 x 16], A and B 16-bit floats (MmaElem::F16 or BF16) read
// from shared memory, C in f32 registers. The kernel never sees a vendor's fragment layout:
//   mma_load_a(a, s, ld)      A[m][k] = s[m * ld + k]
//   mma_load_b_nk(b, s, ld)   B[k][n] = s[n * ld + k]   (B stored as rows of B^T: K rows for Q.K^T)
//   mma_load_b_kn(b, s, ld)   B[k][n] = s[k * ld + n]   (B stored as rows: V rows for P.V)
//   mma<E>(c, a, b)           c += A . B, products exact, sums in f32
//   mma_store<E>(c, s, ld)    s[m * ld + n] = c[m][n] rounded to E (nearest even)
//   mma_zero(c)               c = 0
//   mma_acc_to_a<E>(a, c, s, ld)  A[m][k] = c[m][k] rounded to E: an accumulator tile (e.g. softmax P) as the A
//                             operand of the next product. Where kMmaAccToARegisters is true (CUDA) the fragment is
//                             built in registers and s is never touched (a caller may leave it unallocated);
//                             elsewhere c goes through the per-warp 16 x 16 scratch tile s (store, warp_sync,
//                             load), which the fragment may go on referring to (the rule below).
// s (uint16_t*) in shared memory, 16-byte aligned, ld a multiple of 8. Every lane of the warp makes each call.
// A fragment may go on referring to the shared memory it was loaded from (the FMA implementations read it
// inside mma): that memory must not change until the last mma using the fragment.
// Accumulators: this lane holds c.v[i], i < kMmaAccPerLane, at row mma_acc_row(i), column mma_acc_col(i).
// A lane's elements lie in kMmaRowsPerLane rows: element i in row slot mma_acc_slot(i) (constexpr), slot s at
// row mma_slot_row(s). mma_rows_max / mma_rows_sum take one value per slot and combine it over the lanes
// holding the same rows (all 16 columns), so row statistics (softmax max and sum) never leave registers.
// Implementations: mma.sync m16n8k16 + ldmatrix (CUDA, sm_80+), MFMA 16x16x16 (gfx908 / gfx90a / gfx942), and
// backends/gpu/fma_mma_f16.h (FMA on shared memory: gfx1030 and other targets without a matrix unit, and the
// CPU emulator), which use different layouts, so the emulator also checks that a kernel depends on none.

#include "rbee/core/error.h"
#include "rbee/core/host_device.h"  // RBEE_HOST_DEVICE

// Checks a runtime call and throws rbee::Error(Backend) with the vendor's message.
#define RBEE_GPU_CHECK(call)                                                                                   \
  do {                                                                                                         \
    const ::rbee::gpu::Status rbee_status_ = (call);                                                           \
    if (rbee_status_ != ::rbee::gpu::kSuccess)                                                                 \
      RBEE_THROW(::rbee::ErrorCode::Backend, "{} failed: {} ({}:{})", #call,                                   \
                 ::rbee::gpu::status_string(rbee_status_), __FILE__, __LINE__);                                \
  } while (0)

// Checks the launch just issued.
#define RBEE_GPU_CHECK_LAUNCH() RBEE_GPU_CHECK(::rbee::gpu::get_last_error())
