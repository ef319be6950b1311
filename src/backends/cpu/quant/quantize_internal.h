// Per-type quantizers behind quantize_row (quantize_legacy.cpp, quantize_k.cpp) and the scale searches the
// K-quants share (kquant_fit.cpp). `nb` counts blocks; x holds nb * block_size floats.
#pragma once

#include <cstdint>

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
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);

// Round to nearest, ties to even (what ggml's nearest_int computes); NaN gives 0.
int nearest_int(float v);

// Asymmetric fit x ~ scale * L + min with L in [0, nmax] and min <= 0, minimizing sum w * |err|^p (p = 1 when
// use_abs_error, else 2). Starts from the range [min(x, 0), max(x)], then tries nstep + 1 grid scales
// (nmax + rmin + rdelta * i) / range, each followed by a weighted least-squares solve for scale and min, and
// keeps the best. Writes L[0..n), returns the scale and sets *neg_min = -min (>= 0).
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep, bool use_abs_error);

// Symmetric fit x ~ scale * (L - nmax) with L - nmax in [-nmax, nmax - 1], weights x^2: the scale from the
// largest-magnitude element, then up to 5 passes of per-element coordinate descent on the weighted error.
// Writes L[0..n) (offset by nmax) and returns the scale (signed; 0 for an all-zero group).
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L);

// Symmetric fit as above, but searching 19 grid scales -(nmax + 0.1 i) / max(x) for the best weighted
// least-squares scale (weights x^2). Writes L (offset by nmax), returns the scale.
float fit_symmetric_grid(int n, int nmax, const float* x, int8_t* L);

}  // namespace rbee::cpu::quant
