// Front-ends of quantize, dequantize and qmatmul (a linear layer on quantized or half-precision weights).
// Shapes: the last axis is the row (K, a multiple of the block size); leading axes are batch dims that the
// kernels see flattened to rows.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

namespace {
// Rows of a [..., K] tensor, as the 2-D [rows, K] shape the kernels take.
Shape as_rows(const Shape& shape) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < shape.rank(); ++i) rows *= shape[i];
  return Shape{rows, shape[shape.rank() - 1]};
}

void check_whole_blocks(const char* op, const char* arg, DType type, int64_t k) {
  const int bs = dtype_block_size(type);
  RBEE_CHECK(k % bs == 0, "{}: last dimension of '{}' is {}, not a multiple of the {} block size {}", op, arg, k,
             dtype_name(type), bs);
}
}  // namespace

Tensor quantize(const Tensor& x, DType dtype) {
  check_defined("quantize", "x", x);
  RBEE_CHECK(x.dtype() == DType::F32, "quantize: x must be f32, got {}", dtype_name(x.dtype()));
  RBEE_CHECK(is_quantized(dtype), "quantize: target dtype {} is not a block type", dtype_name(dtype));
  RBEE_CHECK(x.rank() >= 1, "quantize: x must have at least one dimension, got shape {}", x.shape().to_string());
  check_whole_blocks("quantize", "x", dtype, x.dim(-1));
  check_supported("quantize", x.device(), OpKind::Quantize, {x.dtype(), dtype});
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  if (x.numel() == 0) return out;
  const Tensor src = x.contiguous().view(as_rows(x.shape()));
  Tensor out_rows = out.view(as_rows(x.shape()));
  x.device().kernels().quantize(src, out_rows);
  return out;
}

Tensor dequantize(const Tensor& q) {
  check_defined("dequantize", "q", q);
  RBEE_CHECK(is_quantized(q.dtype()), "dequantize: q must have a block dtype, got {}", dtype_name(q.dtype()));
  check_supported("dequantize", q.device(), OpKind::Dequantize, {q.dtype(), DType::F32});
  Tensor out = Tensor::empty(q.shape(), DType::F32, q.device());
  if (q.numel() == 0) return out;
  const Tensor src = q.contiguous().view(as_rows(q.shape()));
  Tensor out_rows = out.view(as_rows(q.shape()));
  q.device().kernels().dequantize(src, out_rows);
  return out;
}

Tensor qmatmul(const Tensor& x, const Tensor& w) {
  check_defined("qmatmul", "x", x);
  check_defined("qmatmul", "w", w);
  Device& device = common_device("qmatmul", {&x, &w});
  RBEE_CHECK(x.dtype() == DType::F32, "qmatmul: x must be f32, got {}", dtype_name(x.dtype()));
  RBEE_CHECK(is_quantized(w.dtype()) || w.dtype() == DType::F32 || w.dtype() == DType::F16 ||
                 w.dtype() == DType::BF16,
             "qmatmul: w must be a block dtype or f32/f16/bf16, got {}", dtype_name(w.dtype()));
  RBEE_CHECK(w.rank() == 2, "qmatmul: w must be [N, K], got shape {}", w.shape().to_string());
  RBEE_CHECK(x.rank() >= 1, "qmatmul: x must be [..., K], got shape {}", x.shape().to_string());
  const int64_t k = w.dim(1);
  RBEE_CHECK(x.dim(-1) == k, "qmatmul: x has {} features (shape {}) but w expects K = {} (shape {})", x.dim(-1),
             x.shape().to_string(), k, w.shape().to_string());
  check_whole_blocks("qmatmul", "w", w.dtype(), k);
  check_supported("qmatmul", device, OpKind::QMatmul, {x.dtype(), w.dtype(), DType::F32});

  Shape out_shape = x.shape();
  out_shape[out_shape.rank() - 1] = w.dim(0);
  // Empty products: nothing to read; K = 0 sums nothing, so the result is zeros.
  if (x.numel() == 0 || w.numel() == 0) return zeros(out_shape, DType::F32, device);
  const Tensor xr = x.contiguous().view(as_rows(x.shape()));
  const Tensor wc = w.contiguous();
  Tensor out = Tensor::empty(out_shape, DType::F32, device);
  Tensor out_rows = out.view(Shape{xr.dim(0), w.dim(0)});
  device.kernels().qmatmul(xr, wc, out_rows);
  return out;
}

}  // namespace rbee::ops
