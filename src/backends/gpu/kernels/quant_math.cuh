// Scalar rounding helpers of the GPU quantizers, each the device twin of the CPU's (quantize_legacy.cpp;
// nearest_int and clamp_int are the shared backends/common/kquant_fit.h) so that both backends produce the same bytes. Also the 8-bit activation formats' math,
// shared by quantize (Q8_0 / Q8_1 / Q8_K blocks) and the activation quantizer of qmatmul: the two must agree
// exactly, because qmatmul's result is defined on dequantize(quantize(x)).
#pragma once

#include <cstdint>

#include "backends/common/kquant_fit.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/platform.h"

namespace rbee::gpu::quant {

#if defined(__CUDACC__) || defined(__HIPCC__)

using ::rbee::kquant::clamp_int;    // backends/common/kquant_fit.h: one definition for CPU and GPU
using ::rbee::kquant::nearest_int;

// Truncation toward zero of v clamped to [0, hi]; NaN gives 0 (the CPU's trunc_clamp).
__device__ __forceinline__ uint8_t trunc_clamp(float v, int hi) {
  if (!(v > 0.f)) return 0;
  if (v >= (float)hi) return (uint8_t)hi;
  return (uint8_t)(int)v;
}

// round(v) half away from zero into int8; NaN gives 0 (the CPU's round_to_i8).
__device__ __forceinline__ int8_t round_to_i8(float v) {
  if (!(v == v)) return 0;
  const float r = roundf(v);
  return (int8_t)(r < -128.f ? -128 : r > 127.f ? 127 : (int)r);
}

// Q8_0 / Q8_1 scale of a block with largest magnitude amax: d = amax / 127. Q8_0 weights (quantize): quants
// round(x * (1 / d)), ties away from zero (the CPU's quantize_q8_0, gguf-py's).
__device__ __forceinline__ float q8_0_scale(float amax) { return amax / 127.f; }
__device__ __forceinline__ int8_t q8_0_level(float x, float d) {
  const float id = d != 0.f ? 1.f / d : 0.f;
  return round_to_i8(x * id);
}
// The 8-bit activation rule (qmatmul's Q8_0 / Q8_1 activations and quantize to Q8_1; the CPU's
// quantize_q8_activation_block, as ggml's CPU backend quantizes): quants nearest-even(x * (127 / amax)), 0 when
// amax is 0; the scale is q8_0_scale(amax).
__device__ __forceinline__ float q8_act_inv_scale(float amax) { return amax != 0.f ? 127.f / amax : 0.f; }
__device__ __forceinline__ int8_t q8_act_level(float x, float inv_scale) {
  return (int8_t)clamp_int(nearest_int(mul_rn(x, inv_scale)), -128, 127);
}

// Q8_K: the element of largest magnitude (the first one on ties), max, maps to -127 * sign(max):
// iscale = -127 / max, quants clamp(nearest(iscale * x), -127, 127), d = 1 / iscale. max == 0: all zero.
__device__ __forceinline__ float q8_k_iscale(float max) { return -127.f / max; }
__device__ __forceinline__ int8_t q8_k_level(float x, float iscale) {
  return (int8_t)clamp_int(nearest_int(iscale * x), -127, 127);
}

#endif  // device compilation

}  // namespace rbee::gpu::quant
