#include "rbee/backend/op_kinds.h"

namespace rbee {

const char* op_kind_name(OpKind op) {
  static constexpr const char* kNames[kOpKindCount] = {
      "unary", "binary", "affine", "cast", "copy", "fill", "arange", "where",
      "reduce", "softmax", "argsort",
      "rms_norm", "layer_norm", "group_norm", "rope", "attention", "swiglu", "add_rms_norm",
      "matmul", "quantize", "dequantize", "qmatmul",
      "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "im2col", "pool2d", "upsample_nearest2d",
      "index_select", "gather", "index_add", "scatter", "scatter_add",
      "kv_cache_write", "paged_attention", "sample"};
  const int i = (int)op;
  return i >= 0 && i < kOpKindCount ? kNames[i] : "unknown";
}

const char* unary_op_name(UnaryOp op) {
  static constexpr const char* kNames[kUnaryOpCount] = {
      "neg", "recip", "exp", "log", "sin", "cos", "tanh", "erf", "ceil", "floor", "round", "abs",
      "sqr", "sqrt", "gelu_tanh", "gelu_erf", "relu", "elu", "silu", "sigmoid", "sign", "powf", "normcdf"};
  const int i = (int)op;
  return i >= 0 && i < kUnaryOpCount ? kNames[i] : "unknown";
}

const char* binary_op_name(BinaryOp op) {
  static constexpr const char* kNames[kBinaryOpCount] = {"add", "sub", "mul", "div", "min", "max",
                                                         "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  const int i = (int)op;
  return i >= 0 && i < kBinaryOpCount ? kNames[i] : "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::ArgMax: return "argmax";
  }
  return "unknown";
}

}  // namespace rbee
