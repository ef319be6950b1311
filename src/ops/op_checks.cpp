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
