// Type dispatch of the row kernels: quantize_row, activation_dtype and row_dot_kernel.
#include "backends/cpu/quant/quant.h"
#include "backends/cpu/quant/quantize_internal.h"
#include "rbee/core/error.h"

namespace rbee::cpu::quant {

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const int64_t nb = n / dtype_block_size(type);
  switch (type) {
    case DType::Q4_0: return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1: return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0: return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0: return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q8_1: return quantize_q8_1(src, static_cast<BlockQ8_1*>(dst), nb);
    case DType::Q2_K: return quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), nb);
    case DType::Q3_K: return quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), nb);
    case DType::Q4_K: return quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K: return quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K: return quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    case DType::Q8_K: return quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
    default: RBEE_THROW(ErrorCode::Unsupported, "quantize: {} is not a block type", dtype_name(type));
  }
}

DType activation_dtype(DType weight) {
  switch (weight) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q8_1: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q8_K: return DType::Q8_K;
    case DType::F32:
    case DType::F16:
    case DType::BF16: return DType::F32;
    default: RBEE_THROW(ErrorCode::Unsupported, "qmatmul: no kernel for weights of dtype {}", dtype_name(weight));
  }
}

RowDotFn row_dot_kernel(DType weight) {
  RowDotFn fn = legacy_row_dot(weight);
  if (!fn) fn = kquant_row_dot(weight);
  if (!fn) fn = float_row_dot(weight);
  RBEE_CHECK_CODE(fn != nullptr, ErrorCode::Unsupported, "qmatmul: no kernel for weights of dtype {}",
                  dtype_name(weight));
  return fn;
}

}  // namespace rbee::cpu::quant
