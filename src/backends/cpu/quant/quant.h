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
// them: Q4_0/Q5_0/Q8_0/Q8_1 -> Q8_0, Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K; F32 rows for F32/F16/BF16 weights
// (their products run in f32). For F16 / BF16 weights those f32 rows hold x rounded to the weight's type
// (nearest even), qmatmul's semantics for 16-bit weights (rbee/backend/kernels.h; ggml's vec_dot_type).
DType activation_dtype(DType weight);

// An activation row as the dot kernels take it (activation_row_bytes(weight, k) bytes): the k values quantized to
// activation_dtype(weight), and for Q8_0 / Q8_1 rows two arrays of k / 32 at byte offset
// activation_scales_offset(k): the block scales d as f32, then for Q8_0 rows the int32 sum(qs) of each block
// (weights stored with an offset, Q4_0's q + 8, take it out of their block's integer sum exactly), for Q8_1 rows
// the block's own f16 s as f32 (Q4_1 / Q5_1 fold their min in with it). Kernels that revisit the row for every
// weight row read these instead of converting f16s. F32 activations are the k
// floats themselves (F32 weights) or the k floats rounded to f16 / bf16 (F16 / BF16 weights).
int64_t activation_row_bytes(DType weight, int64_t k);
int64_t activation_scales_offset(DType weight, int64_t k);
void quantize_activation_row(DType weight, const float* x, void* dst, int64_t k);

// Dot products of one weight row with up to kMaxRows activation rows:
//   out[r * out_stride] = sum_k w[k] * x_r[k] for r < rows,
// w: one row of k elements of the weight type; x_r = (const char*)x + r * x_stride, an activation row (above).
// k is a multiple of the weight's block size. Each weight block is unpacked once and used for every activation
// row, so a tile of rows costs one pass over the weights.
//
// Accumulation order (the op contract; every path that computes a row follows it, so a row's result does not
// depend on the path, its batch or its neighbours):
//   Q4_0, Q5_0, Q8_0, Q8_1 weights (Q8_0 activations), ggml's reference order: per 32-element block b the
//     products are summed into ONE exact int32 s_b (levels with their offset removed), then
//     acc = fma(d_w[b] * d_x[b], float(s_b), acc) in block order from acc = 0 in f32; out = acc.
//   Q4_1, Q5_1 (Q8_1 activations; x86 kernels and the prompt GEMM): as ggml's AVX2 kernels, 8 int32 lanes of
//     4 products per block, each fma'd with d_w * d_x into 8 f32 lanes, the min term m_w * s_x by a scalar fma
//     chain, then the lanes summed as ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) plus that chain
//     (SmolLM2's logits equal llama.cpp's). The portable targets sum the same per-block terms in one chain.
//   K-quants (Q8_K activations): per 256-element super-block ONE exact int32 S = sum of the products times
//     their integer sub-block scales and ONE int32 C = the min / offset correction from Q8_K's bsums
//     (kquant_scales.h), then acc = fma(d * d_x, float(S), acc), acc = fma(-(dc * d_x), float(C), acc) in
//     super-block order from acc = 0; out = acc.
inline constexpr int kMaxRows = 4;
using RowDotFn = void (*)(int64_t k, const void* w, const void* x, size_t x_stride, int rows, float* out,
                          int64_t out_stride);

// The kernel for `weight` on the best SIMD target of this CPU (Highway dynamic dispatch; resolved per call
// so tests can switch targets). Legacy and K-quant types, and F32/F16/BF16.
RowDotFn row_dot_kernel(DType weight);

// Whether row_dot_kernel runs the AVX2 row kernels now (Highway targets AVX2 and AVX3; a test may restrict the
// targets): the VNNI prompt GEMM and decode matvec reproduce those bit for bit, so they run only then. A table
// lookup (Highway's dynamic dispatch), cheap per call; hwy::SupportedTargets() runs cpuid each time, which a
// virtual machine traps (1.2% of a decode step when it was called per qmatmul).
bool row_kernels_are_x86_simd();
// Whether the F32 / F16 / BF16 row kernels run Highway's AVX3 target now (16 f32 lanes): their summation order
// depends on the lane count, and the F16 / BF16 prompt GEMM reproduces the AVX3 one.
bool float_row_kernel_is_avx3();

// Per-family selectors behind row_dot_kernel (one Highway translation unit each); nullptr for other types.
RowDotFn legacy_row_dot(DType weight);
RowDotFn kquant_row_dot(DType weight);
RowDotFn float_row_dot(DType weight);

}  // namespace rbee::cpu::quant
