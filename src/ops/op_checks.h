// Argument checks shared by the op front-ends. Each throws rbee::Error naming the op and the argument.
#pragma once

#include <initializer_list>
#include <string_view>

#include "rbee/backend/device.h"
#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::ops::detail {

// `t` must be defined.
void check_defined(std::string_view op, std::string_view arg, const Tensor& t);
// All tensors on one device; returns it.
Device& common_device(std::string_view op, std::initializer_list<const Tensor*> tensors);
// The device implements `kind` for these dtypes, else Unsupported (or InvalidArgument when no backend could).
void check_supported(std::string_view op, Device& device, OpKind kind, std::initializer_list<DType> dtypes);
// `t` (named `arg`) has x's dtype: "linear: bias is F16 but x is F32".
void check_dtype_of_x(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& x);
// The residual of a fused op (added to the output before its one rounding): undefined, or x's dtype and exactly
// the output's shape. Returns it contiguous, or an undefined tensor when there is none.
Tensor fused_residual(std::string_view op, const Tensor& residual, const Tensor& x, const Shape& out_shape);
// An axis of x (negative counts from the end) as 0..rank-1; x needs at least one axis.
int normalize_axis(std::string_view op, const Tensor& x, int axis);
// Same dtype for every tensor.
void check_same_dtype(std::string_view op, std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors);

}  // namespace rbee::ops::detail
