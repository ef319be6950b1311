// The norm and SwiGLU row passes of quant_activation.cu written as 16-bit rows: the input of a vendor GEMM on F16 /
// BF16 weights without a separate rounding pass (launch_round_to_half).
#pragma once

#include <cstdint>

#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu::quant {

// launch_norm_rows and launch_swiglu_rows (quant_launch.h) with out in half_type (F16 or BF16): each value rounded
// to nearest-even from the f32 the f32 variants write, as launch_round_to_half rounds f32 rows. out 16-byte
// aligned; sum_out as in launch_norm_rows.
void launch_norm_rows_half(GpuDevice& device, DType half_type, const float* x, const float* residual,
                           const float* weight, float eps, int64_t m, int64_t k, float* sum_out, uint16_t* out,
                           Prefetch pf = {});
void launch_swiglu_rows_half(GpuDevice& device, DType half_type, const float* gate_up, int64_t m, int64_t inner,
                             uint16_t* out, Prefetch pf = {});

}  // namespace rbee::gpu::quant
