#include "ops/op_checks.h"

#include <vector>

namespace rbee::ops::detail {

void check_defined(std::string_view op, std::string_view arg, const Tensor& t) {
  RBEE_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

Device& common_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  Device* device = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!device) device = &t->device();
    RBEE_CHECK(&t->device() == device, "{}: inputs live on different devices ({} and {})", op, device->id(),
               t->device().id());
  }
  RBEE_CHECK(device != nullptr, "{}: no defined input tensor", op);
  return *device;
}

void check_supported(std::string_view op, Device& device, OpKind kind, std::initializer_list<DType> dtypes) {
  std::vector<DType> list(dtypes);
  std::string names;
  for (DType t : list) names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
  RBEE_CHECK(op_dtypes_valid(kind, list), "{}: not defined for dtypes ({})", op, names);
  RBEE_CHECK_CODE(device.kernels().supports(kind, list), ErrorCode::Unsupported,
                  "{}: the {} backend does not support dtypes ({})", op, device.id(), names);
}

void check_dtype_of_x(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& x) {
  RBEE_CHECK(t.dtype() == x.dtype(), "{}: {} is {} but x is {}", op, arg, dtype_name(t.dtype()), dtype_name(x.dtype()));
}

Tensor fused_residual(std::string_view op, const Tensor& residual, const Tensor& x, const Shape& out_shape) {
  if (!residual.defined()) return {};
  check_dtype_of_x(op, "residual", residual, x);
  RBEE_CHECK(residual.shape() == out_shape, "{}: residual must have the output's shape {}, got {}", op,
             out_shape.to_string(), residual.shape().to_string());
  return residual.contiguous();
}

int normalize_axis(std::string_view op, const Tensor& x, int axis) {
  RBEE_CHECK(x.rank() >= 1, "{}: x is a rank-0 tensor; it needs at least one axis", op);
  RBEE_CHECK(axis >= -x.rank() && axis < x.rank(), "{}: axis {} is out of range for x of shape {}", op, axis,
             x.shape().to_string());
  return axis < 0 ? axis + x.rank() : axis;
}

void check_same_dtype(std::string_view op, std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors) {
  const std::pair<std::string_view, const Tensor*>* first = nullptr;
  for (const auto& entry : tensors) {
    if (!first) {
      first = &entry;
      continue;
    }
    RBEE_CHECK(entry.second->dtype() == first->second->dtype(), "{}: '{}' is {} but '{}' is {}", op, entry.first,
               dtype_name(entry.second->dtype()), first->first, dtype_name(first->second->dtype()));
  }
}

}  // namespace rbee::ops::detail
