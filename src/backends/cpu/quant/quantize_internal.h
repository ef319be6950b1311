// Per-type quantizers behind quantize_row (quantize_legacy.cpp, quantize_k.cpp) and the scale searches the
// K-quants share (backends/common/kquant_fit.h). `nb` counts blocks; x holds nb * block_size floats.
#pragma once

#include <cstdint>

#include "backends/common/kquant_fit.h"
#include "backends/cpu/quant/blocks.h"

namespace rbee::cpu::quant {

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb);
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb);
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);

// The scale searches the K-quants share (one definition for the CPU and the GPU kernels).
using kquant::clamp_int;
using kquant::fit_scale_min;
using kquant::fit_symmetric_descent;
using kquant::fit_symmetric_grid;
using kquant::nearest_int;

}  // namespace rbee::cpu::quant
