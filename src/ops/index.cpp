// Front-ends of the indexing ops: index_select, gather, index_add, scatter, scatter_add.
//
// Shapes (PyTorch's conventions; `axis` may be negative):
//   index_select(x, ids [m], axis)        -> x's shape with dim axis = m
//   gather(x, ids, axis)                  -> ids' shape; ids has x's rank, ids.dim(d) <= x.dim(d) for d != axis
//   index_add(x, ids [m], src, axis)      -> x's shape; src is x's shape with dim axis = m
//   scatter(_add)(x, ids, src, axis)      -> x's shape; src has ids' shape, which is as for gather
// ids are I64, I32 or U32; an id outside [0, x.dim(axis)) throws InvalidArgument naming it and its position.
// The in-place-style ops return a new tensor: a copy of x that the kernel then updates.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;
using detail::normalize_axis;

namespace {

void check_ids_dtype(const char* op, const Tensor& ids) {
  const DType t = ids.dtype();
  RBEE_CHECK(t == DType::I64 || t == DType::I32 || t == DType::U32, "{}: ids must be i64, i32 or u32, got {}", op,
             dtype_name(t));
}

void check_1d_ids(const char* op, const Tensor& ids) {
  RBEE_CHECK(ids.rank() == 1, "{}: ids must be 1-D, got shape {}", op, ids.shape().to_string());
}

// ids of x's rank whose dims fit in x's outside `axis` (gather and scatter).
void check_nd_ids(const char* op, const Tensor& x, const Tensor& ids, int axis) {
  RBEE_CHECK(ids.rank() == x.rank(), "{}: ids must have x's rank {}, got shape {}", op, x.rank(),
             ids.shape().to_string());
  for (int d = 0; d < x.rank(); ++d) {
    RBEE_CHECK(d == axis || ids.dim(d) <= x.dim(d),
               "{}: ids shape {} exceeds x shape {} in dimension {} (only axis {} may be larger)", op,
               ids.shape().to_string(), x.shape().to_string(), d, axis);
  }
}

void check_src_dtype(const char* op, const Tensor& x, const Tensor& src) {
  RBEE_CHECK(src.dtype() == x.dtype(), "{}: src is {} but x is {}", op, dtype_name(src.dtype()),
             dtype_name(x.dtype()));
}

// Shared by scatter and scatter_add.
Tensor scatter_op(const char* op, OpKind kind, const Tensor& x, const Tensor& ids, const Tensor& src, int axis) {
  check_defined(op, "x", x);
  check_defined(op, "ids", ids);
  check_defined(op, "src", src);
  Device& device = common_device(op, {&x, &ids, &src});
  const int a = normalize_axis(op, x, axis);
  check_ids_dtype(op, ids);
  check_src_dtype(op, x, src);
  check_supported(op, device, kind, {x.dtype(), ids.dtype(), src.dtype(), x.dtype()});
  check_nd_ids(op, x, ids, a);
  RBEE_CHECK(src.shape() == ids.shape(), "{}: src shape {} must equal ids shape {}", op, src.shape().to_string(),
             ids.shape().to_string());
  Tensor out = x.clone();
  if (kind == OpKind::Scatter) device.kernels().scatter(ids.contiguous(), src.contiguous(), a, out);
  else device.kernels().scatter_add(ids.contiguous(), src.contiguous(), a, out);
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x, const Tensor& ids, int axis) {
  check_defined("index_select", "x", x);
  check_defined("index_select", "ids", ids);
  Device& device = common_device("index_select", {&x, &ids});
  const int a = normalize_axis("index_select", x, axis);
  check_ids_dtype("index_select", ids);
  check_supported("index_select", device, OpKind::IndexSelect, {x.dtype(), ids.dtype(), x.dtype()});
  check_1d_ids("index_select", ids);
  Shape shape = x.shape();
  shape[a] = ids.dim(0);
  Tensor out = Tensor::empty(shape, x.dtype(), device);
  device.kernels().index_select(x.contiguous(), ids.contiguous(), a, out);
  return out;
}

Tensor gather(const Tensor& x, const Tensor& ids, int axis) {
  check_defined("gather", "x", x);
  check_defined("gather", "ids", ids);
  Device& device = common_device("gather", {&x, &ids});
  const int a = normalize_axis("gather", x, axis);
  check_ids_dtype("gather", ids);
  check_supported("gather", device, OpKind::Gather, {x.dtype(), ids.dtype(), x.dtype()});
  check_nd_ids("gather", x, ids, a);
  Tensor out = Tensor::empty(ids.shape(), x.dtype(), device);
  device.kernels().gather(x.contiguous(), ids.contiguous(), a, out);
  return out;
}

Tensor index_add(const Tensor& x, const Tensor& ids, const Tensor& src, int axis) {
  check_defined("index_add", "x", x);
  check_defined("index_add", "ids", ids);
  check_defined("index_add", "src", src);
  Device& device = common_device("index_add", {&x, &ids, &src});
  const int a = normalize_axis("index_add", x, axis);
  check_ids_dtype("index_add", ids);
  check_src_dtype("index_add", x, src);
  check_supported("index_add", device, OpKind::IndexAdd, {x.dtype(), ids.dtype(), src.dtype(), x.dtype()});
  check_1d_ids("index_add", ids);
  Shape want = x.shape();
  want[a] = ids.dim(0);
  RBEE_CHECK(src.shape() == want, "index_add: src shape {} must be {} (x's shape with dim {} = ids length {})",
             src.shape().to_string(), want.to_string(), a, ids.dim(0));
  Tensor out = x.clone();
  device.kernels().index_add(ids.contiguous(), src.contiguous(), a, out);
  return out;
}

Tensor scatter(const Tensor& x, const Tensor& ids, const Tensor& src, int axis) {
  return scatter_op("scatter", OpKind::Scatter, x, ids, src, axis);
}

Tensor scatter_add(const Tensor& x, const Tensor& ids, const Tensor& src, int axis) {
  return scatter_op("scatter_add", OpKind::ScatterAdd, x, ids, src, axis);
}

}  // namespace rbee::ops
