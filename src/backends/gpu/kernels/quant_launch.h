// Host-side launchers shared by the quantization kernel files (kernels/quant_*.cu). GpuKernels::qmatmul
// (quant_qmatmul.cu) composes them: quantize the activations once, then either the matvec kernels (small M)
// or the BLAS path (large M).
#pragma once

#include <cstdint>

#include "backends/gpu/platform.h"
#include "rbee/core/dtype.h"

namespace rbee {
class Tensor;
}

namespace rbee::gpu {

class GpuDevice;

namespace quant {

// Activations quantized to 8 bits the way qmatmul pairs them with a weight type (the CPU's activation_dtype):
// blocks of 32 with an f16-rounded scale (Q8_0 / Q8_1 for legacy weights) or of 256 with an f32 scale (Q8_K
// for K-quant weights). Device arrays, row m of [M, K] at:
//   q + m * k      int8 levels
//   d + m * k / 32 the scale of each 32 elements (a Q8_K scale is repeated for its 8 groups)
//   s + m * k / 16 the sum of the levels of each 16 elements (what the min terms of weights multiply)
struct QActs {
  const int8_t* q;
  const float* d;
  const int32_t* s;
  int64_t k;
};

// Quantizes x [m, k] (f32, contiguous, 16-byte aligned; k a multiple of 32, of 256 when q8k) into `scratch`
// (allocated here from the device's caching allocator; keep it alive while the result is used).
QActs quantize_activations(GpuDevice& device, const float* x, int64_t m, int64_t k, bool q8k, Tensor& scratch);

// Largest number of activation rows one float gemv launch handles.
inline constexpr int kMatvecMaxRows = 8;
// Largest number of activation rows one quantized matvec launch handles (batched decode: 16 sequences stream
// the packed weights once).
inline constexpr int kQuantMatvecMaxRows = 16;

// out[r * ldo + j] = sum_k w[j, k] * x^[r, k] for j < n, r < m (m <= kQuantMatvecMaxRows), where x^ are the
// quantized activations and w [n, k] the packed weight rows (row_bytes apart).
struct QmvArgs {
  const uint8_t* w;
  int64_t n, k, row_bytes;
  QActs x;
  int m;
  float* out;
  int64_t ldo;
};
void launch_quant_matvec(GpuDevice& device, DType type, const QmvArgs& args);
// Per type (explicitly instantiated in quant_matvec_legacy.cu and quant_matvec_kquant.cu).
template <DType T>
void launch_quant_matvec_typed(GpuDevice& device, const QmvArgs& args);

// The same for F32 / F16 / BF16 weights and f32 activations x [m, k] (row stride k): out = w . x for F32
// weights, w . round16(x) for 16-bit weights (x rounded to the weight's type in registers), f32 sums.
struct GemvArgs {
  const void* w;
  int64_t n, k;
  const float* x;
  int m;
  float* out;
  int64_t ldo;
};
void launch_float_gemv(GpuDevice& device, DType type, const GemvArgs& args);
// out[i] = x[i] rounded to `half_type` (F16 or BF16, nearest even) for i < count: the operand of the 16-bit
// GEMM of qmatmul's BLAS path. x and out 16-byte aligned.
void launch_round_to_half(GpuDevice& device, DType half_type, const float* x, int64_t count, uint16_t* out);

// ---- operands of the BLAS path: values split into a high and a low part of a 16-bit float type, so that
// products of 16-bit tensor-core GEMMs reproduce f32 products to ~2^-16 relative ----

// hi / lo [m, k] BF16 (raw bits) of the dequantized activations d * q.
void launch_split_activations(GpuDevice& device, const QActs& x, int64_t m, uint16_t* hi, uint16_t* lo);
// hi / lo [n, k] BF16 of the dequantized rows of w (n rows of `type`, row_bytes apart), bit-exact values
// before the split.
void launch_split_weights(GpuDevice& device, DType type, const uint8_t* w, int64_t n, int64_t k, int64_t row_bytes,
                          uint16_t* hi, uint16_t* lo);

}  // namespace quant
}  // namespace rbee::gpu
