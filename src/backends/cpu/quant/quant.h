// Row-level quantization kernels of the CPU backend: dequantize, quantize, and dot products that run on the
// packed blocks. cpu_quant.cpp drives them over tensors and threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::cpu::quant {

// dst[0..n) = the values of n elements packed as `type` at src. n is a multiple of the block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Packs src[0..n) into n / block_size blocks of `type` at dst. Legacy types round to nearest as ggml's
// reference quantizers do (bit-exact with them); K-quants search scales and mins per sub-block the way ggml's
// reference quantizers do (quantize_k.cpp). n is a multiple of the block size.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// The format activations are quantized to before a dot product with weights of `weight` type, as ggml pairs
// them: Q4_0/Q5_0/Q8_0/Q8_1 -> Q8_0, Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K; F32 for F32/F16/BF16 weights
// (their products run in f32).
DType activation_dtype(DType weight);

// Dot products of one weight row with up to kMaxRows activation rows:
//   out[r * out_stride] = sum_k w[k] * x_r[k] for r < rows,
// w: one row of k elements of the weight type; x_r = (const char*)x + r * x_stride, one row of k elements of
// activation_dtype(weight). k is a multiple of the weight's block size. Each weight block is unpacked once and
// used for every activation row, so a tile of rows costs one pass over the weights.
inline constexpr int kMaxRows = 4;
using RowDotFn = void (*)(int64_t k, const void* w, const void* x, size_t x_stride, int rows, float* out,
                          int64_t out_stride);

// The kernel for `weight` on the best SIMD target of this CPU (Highway dynamic dispatch; resolved per call
// so tests can switch targets). Legacy and K-quant types, and F32/F16/BF16.
RowDotFn row_dot_kernel(DType weight);

// Per-family selectors behind row_dot_kernel (one Highway translation unit each); nullptr for other types.
RowDotFn legacy_row_dot(DType weight);
RowDotFn kquant_row_dot(DType weight);
RowDotFn float_row_dot(DType weight);

}  // namespace rbee::cpu::quant
