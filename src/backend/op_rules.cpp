#include "rbee/backend/op_kinds.h"

namespace rbee {

namespace {
bool plain(DType t) { return !is_quantized(t); }
bool matmul_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool index_type(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::U32; }
}  // namespace

bool op_dtypes_valid(OpKind op, std::span<const DType> d) {
  if (d.empty()) return false;
  const DType x = d[0];
  auto second = [&](DType fallback) { return d.size() > 1 ? d[1] : fallback; };
  switch (op) {
    case OpKind::Unary:
      return (is_floating(x) || x == DType::I64 || x == DType::I32) && second(x) == x;
    case OpKind::Binary:
      return plain(x) && second(x) == x && (d.size() < 3 || d[2] == x || d[2] == DType::U8);
    case OpKind::Affine:
    case OpKind::Softmax:
    case OpKind::RmsNorm:
    case OpKind::LayerNorm:
    case OpKind::GroupNorm:
    case OpKind::Rope:
    case OpKind::Attention:
    case OpKind::Swiglu:
    case OpKind::AddRmsNorm:
    case OpKind::Conv1d:
    case OpKind::Conv2d:
    case OpKind::ConvTranspose1d:
    case OpKind::ConvTranspose2d:
    case OpKind::Im2col:
    case OpKind::Pool2d:
    case OpKind::UpsampleNearest2d:
      return is_floating(x);
    case OpKind::Cast:
      return plain(x) && plain(second(x));
    case OpKind::Copy:
      return true;
    case OpKind::Fill:
    case OpKind::Arange:
    case OpKind::Reduce:
    case OpKind::Argsort:
      return plain(x);
    case OpKind::Where:
      return x == DType::U8 && plain(second(DType::F32));
    case OpKind::Matmul:
      return matmul_float(x) && second(x) == x;
    case OpKind::Quantize:
      return x == DType::F32 && is_quantized(second(DType::F32));
    case OpKind::Dequantize:
      return is_quantized(x) && second(DType::F32) == DType::F32;
    case OpKind::QMatmul:
      return x == DType::F32 && (is_quantized(second(DType::F32)) || matmul_float(second(DType::F32)));
    case OpKind::KvCacheWrite:    // k/v rows (F32/F16/BF16) into an F16/F32/BF16 cache
      return (x == DType::F32 || x == DType::F16 || x == DType::BF16) &&
             (second(DType::F16) == DType::F16 || second(DType::F16) == DType::F32 ||
              second(DType::F16) == DType::BF16);
    case OpKind::PagedAttention:  // q (F32), cache dtype
      return x == DType::F32 && (second(DType::F16) == DType::F16 || second(DType::F16) == DType::F32 ||
                                 second(DType::F16) == DType::BF16);
    case OpKind::Sample:  // logits (F32); the settings and ids have fixed dtypes (kernels.h)
      return x == DType::F32;
    case OpKind::IndexSelect:
    case OpKind::Gather:
    case OpKind::IndexAdd:
    case OpKind::Scatter:
    case OpKind::ScatterAdd:
      return plain(x) && index_type(second(DType::I64));
  }
  return false;
}

}  // namespace rbee
