// Per-type quantizers behind quantize_row (quantize_legacy.cpp, quantize_k.cpp) and the scale searches the
// K-quants share (backends/common/kquant_fit.h). `nb` counts blocks; x holds nb * block_size floats.
// Attribution: the quantization rules follow ggml / llama.cpp (MIT License; NOTICE holds the license text).
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
// Q8_1 exists only as an activation format: quants by the activation rule below, s = f16(d * sum(qs)) with d
// before its f16 rounding.
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb);
// Q8_0 blocks by the activation rule (what qmatmul multiplies Q4_0 / Q5_0 / Q8_0 weights with).
void quantize_q8_0_activation(const float* x, BlockQ8_0* y, int64_t nb);
// The 8-bit activation rule, as ggml's CPU backend quantizes activations before its dot products (llama.cpp's
// numerics): amax = max |x|, quants nearest-even(x * (127 / amax)) (0 when amax is 0), d = amax / 127 (f32, the
// caller rounds it to f16). Unlike the weight rule (quantize_q8_0: x * (1 / d), ties away from zero) the
// reciprocal is taken of amax, not of d, which moves the rounding of some quants. Writes 32 quants, returns
// their sum.
int quantize_q8_activation_block(const float* x, float& d_out, int8_t* qs);
// quantize_q8_activation_block over nb consecutive blocks with SIMD (quantize_activation_x86.cpp; the same bits):
// block i's 32 quants at qs + i * stride, its d (f32) at d[i], its quants' sum at sum[i]. False (nothing written)
// where this build or CPU has no SIMD version.
bool quantize_q8_activation_simd(const float* x, int64_t nb, int8_t* qs, size_t stride, float* d, int32_t* sum);
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
// Q8_K (the K-quants' activation format): the SIMD version where the CPU has one (quantize_activation_x86.cpp), else
// the reference; both give the same bits.
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);
void quantize_q8_k_reference(const float* x, BlockQ8_K* y, int64_t nb);
// False (and nothing written) where this build or CPU has no SIMD version.
bool quantize_q8_k_simd(const float* x, BlockQ8_K* y, int64_t nb);
// out[i] = x[i] rounded to f16 (bf16 = false) or bf16 and back to f32, for i < n: the bits of
// f16_bits_to_f32(f32_to_f16_bits(x)) / bf16_bits_to_f32(f32_to_bf16_bits(x)) (rbee/core/half.h), NaNs included.
// The activation rows of qmatmul with F16 / BF16 weights (quant.h). False (nothing written) without a SIMD version.
bool round_to_16bit_simd(bool bf16, const float* x, float* out, int64_t n);

// The scale searches the K-quants share (one definition for the CPU and the GPU kernels).
using kquant::clamp_int;
using kquant::fit_scale_min;
using kquant::fit_symmetric_descent;
using kquant::fit_symmetric_grid;
using kquant::nearest_int;

}  // namespace rbee::cpu::quant
