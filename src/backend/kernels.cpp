#include "rbee/backend/kernels.h"

#include "rbee/core/error.h"
#include "rbee/core/tensor.h"

namespace rbee {

void Kernels::unsupported(OpKind op) const {
  RBEE_THROW(ErrorCode::Unsupported, "op '{}' is not implemented by the {} backend", op_kind_name(op), backend_name_);
}

void Kernels::copy_elements(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype()) copy(src, dst);
  else cast(src, dst);
}

// Defaults: a backend that does not override an op reports it as unsupported.
#define RBEE_OP(Kind, rule, backends, method, params) \
  void Kernels::method params { unsupported(OpKind::Kind); }
#include "rbee/backend/op_table.def"

}  // namespace rbee
