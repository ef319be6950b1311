// The skinny 16-bit product of batched decode: out [M, N] f32 = x [M, K] . w [N, K]^T (+ residual [M, N]) for
// 16-bit x and w of one type (F16 or BF16), products exact and summed in f32, M from 9 to kSkinnyMaxRows rows
// (decode batches: one row per sequence). qmatmul's float-weight path (quant_qmatmul.cu) takes it before the
// vendor GEMM where skinny_gemm_enabled() says so.
//
// Why our own: at decode sizes the weights are the whole cost (M = 64 reads each weight once for 64 rows), and
// the vendor GEMM's kernels for the narrow products of a tensor-split rank (N = 4096 with K = 2048 or 5504) stream
// them at under half the copy bandwidth (docs/perf-notes/multi-device.md, eighth two-GPU session, call 2). This
// kernel (gemm_skinny.cu) is built for that shape: every block reads its weight tile once, K is split over enough
// blocks to fill the GPU, a split's weight loads start before the previous kernel finishes (programmatic
// dependent launch), and the residual add rides in the epilogue. On ROCm builds without a vendor BLAS it replaces
// the gemv's ceil(M / 8) passes over the weights.
#pragma once

#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::gpu {

class GpuDevice;

inline constexpr int64_t kSkinnyMinRows = 9;   // fewer rows take the gemv (quant_launch.h kMatvecMaxRows = 8)
inline constexpr int64_t kSkinnyMaxRows = 64;  // one row tile; more rows take the vendor GEMM

// x, w, residual and out 16-byte aligned, K a multiple of 8, rows dense (strides K and N). residual may be null
// (out = x . w^T) and may not alias out.
struct SkinnyGemmArgs {
  DType type = DType::F16;  // of x and w: F16 or BF16
  const uint16_t* x = nullptr;
  const uint16_t* w = nullptr;
  const float* residual = nullptr;
  float* out = nullptr;
  int64_t m = 0, n = 0, k = 0;
};

// Whether qmatmul takes the skinny product for an m-row product with weights of `type` [n, k] on this device:
// RBEE_SKINNY_GEMM=1 (on), 0 (off), unset: on where the device has no vendor BLAS (the gemv would read the
// weights ceil(m / 8) times) and, with one, where measurements put it ahead (docs/perf-notes/multi-device.md).
bool skinny_gemm_takes(const GpuDevice& device, DType type, int64_t m, int64_t n, int64_t k);

// Runs the product (the caller checked skinny_gemm_takes and the alignment). Splits K over the blocks of one
// output tile when the tiles alone leave the GPU short of blocks (RBEE_SKINNY_SPLITS=S forces S, a measurement
// knob); the last split of a tile adds the partial sums in split order, so the result does not depend on timing.
void launch_skinny_gemm(GpuDevice& device, const SkinnyGemmArgs& args);

}  // namespace rbee::gpu
