// Type dispatch of the row kernels: quantize_row, activation_dtype and row_dot_kernel.
#include <cstring>

#include "backends/cpu/quant/quant.h"
#include "backends/cpu/quant/quantize_internal.h"
#include "rbee/core/error.h"
#include "rbee/core/half.h"

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

int64_t activation_scales_offset(DType weight, int64_t k) {
  const DType a = activation_dtype(weight);
  return (dtype_row_bytes(a, k) + 31) / 32 * 32;
}

int64_t activation_row_bytes(DType weight, int64_t k) {
  const DType a = activation_dtype(weight);
  if (a == DType::F32) return k * (int64_t)sizeof(float);
  if (a == DType::Q8_K) return dtype_row_bytes(a, k);
  const int64_t scales = 2 * (k / kQK) * (int64_t)sizeof(float);
  return activation_scales_offset(weight, k) + scales;
}

void quantize_activation_row(DType weight, const float* x, void* dst, int64_t k) {
  const DType a = activation_dtype(weight);
  if (a == DType::F32) {
    float* out = static_cast<float*>(dst);
    if ((weight == DType::F16 || weight == DType::BF16) && round_to_16bit_simd(weight == DType::BF16, x, out, k)) return;
    if (weight == DType::F16) {
      for (int64_t i = 0; i < k; ++i) out[i] = f16_bits_to_f32(f32_to_f16_bits(x[i]));
    } else if (weight == DType::BF16) {
      for (int64_t i = 0; i < k; ++i) out[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
    } else {
      std::memcpy(dst, x, (size_t)k * sizeof(float));
    }
    return;
  }
  if (a == DType::Q8_0) quantize_q8_0_activation(x, static_cast<BlockQ8_0*>(dst), k / kQK);
  else quantize_row(a, x, dst, k);
  if (a == DType::Q8_K) return;
  const int64_t nb = k / kQK;
  float* side = reinterpret_cast<float*>(static_cast<char*>(dst) + activation_scales_offset(weight, k));
  if (a == DType::Q8_0) {
    const auto* b = static_cast<const BlockQ8_0*>(dst);
    int32_t* sums = reinterpret_cast<int32_t*>(side + nb);
    for (int64_t i = 0; i < nb; ++i) {
      int32_t sum = 0;
      for (int j = 0; j < kQK; ++j) sum += b[i].qs[j];
      side[i] = f16_to_f32(b[i].d);
      sums[i] = sum;
    }
  } else {
    const auto* b = static_cast<const BlockQ8_1*>(dst);
    for (int64_t i = 0; i < nb; ++i) {
      side[i] = f16_to_f32(b[i].d);
      side[nb + i] = f16_to_f32(b[i].s);
    }
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
