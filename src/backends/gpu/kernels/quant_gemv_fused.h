// Float weights times ONE activation row formed from a fused source, in one launch instead of a row pass and the
// gemv (norm_qmatmul / swiglu_qmatmul at M = 1, the single-sequence decode step; quant_qmatmul.cu dispatches,
// quant_gemv_float.cu holds the kernel):
//   out[j] = sum_k w[j, k] * x'[k] (+ residual[j]),  x' = h rounded to the weight's type (h itself for F32), with
//   h = rms_norm(s) * norm_weight, s = x or x + x_residual (then also written to sum_out)     (norm)
//   h = silu(gate) * up of x = gate_up [2k], gate first                                       (swiglu)
// Numerics of the row pass + launch_float_gemv: the same f32 products and sums in the same order per row; only the
// norm's double sum of squares runs in another order (so batch-invariant mode keeps the row pass).
// Every pointer 16-byte aligned, k a multiple of 8, sum_out aliasing neither x nor x_residual.
#pragma once

#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::gpu {

class GpuDevice;

namespace quant {

inline constexpr int kFusedGemvThreads = 512;
inline constexpr int64_t kFusedGemvMaxSmem = int64_t{40} << 10;  // x' lives in shared memory: k * element bytes

struct FusedGemvArgs {
  const void* w;  // [n, k] F32 / F16 / BF16
  int64_t n, k;
  const float* x;            // norm: x [k]; swiglu: gate_up [2k]
  const float* x_residual;   // norm: added to x first, or null
  const float* norm_weight;  // norm: [k]
  float eps;
  float* sum_out;         // norm with x_residual: s [k]
  float* out;             // [n]
  const float* residual;  // [n] added to out, or null
};

// RBEE_GEMV_FUSED=0: the row pass + gemv of before (A/B runs).
bool fused_float_gemv_enabled();
// Whether launch_fused_float_gemv takes `type` weights with rows of k (x' fits its shared memory).
bool fused_float_gemv_fits(DType type, int64_t k);
// A programmatic dependent launch under pdl_enabled() (quant_launch.h).
void launch_fused_float_gemv(GpuDevice& device, DType type, bool norm, const FusedGemvArgs& args);

}  // namespace quant
}  // namespace rbee::gpu
