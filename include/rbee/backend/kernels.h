// Kernels: what a backend implements, one method per op of the op table (op_table.def, which also states each
// kernel's contract and the layout conventions).
//
// The front-end (rbee/ops.h) validates every argument, allocates outputs and establishes the preconditions
// written in the table; kernels only compute. A backend overrides what it implements and answers supports()
// truthfully; the defaults throw Unsupported naming the op and the backend.
#pragma once

#include <span>
#include <string>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/dtype.h"

namespace rbee {

class Tensor;

class Kernels {
 public:
  explicit Kernels(std::string backend_name) : backend_name_(std::move(backend_name)) {}
  virtual ~Kernels() = default;

  // Whether `op` runs on this backend for these dtypes (inputs first, then output, as each method lists them).
  virtual bool supports(OpKind op, std::span<const DType> dtypes) const = 0;

  // One method per op of the op table, with the contract written above its entry in op_table.def. The defaults
  // throw Unsupported naming the op and the backend.
#define RBEE_OP(Kind, rule, backends, method, params) virtual void method params;
#include "rbee/backend/op_table.def"

  // dst = src through copy (same dtype) or cast: Device::copy_elements of every backend.
  void copy_elements(const Tensor& src, Tensor& dst);

  const std::string& backend_name() const { return backend_name_; }

 protected:
  [[noreturn]] void unsupported(OpKind op) const;

 private:
  std::string backend_name_;
};

}  // namespace rbee
