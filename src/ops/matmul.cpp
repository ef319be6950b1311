// Front-end of matmul: NumPy matmul semantics on tensors.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

// a [..., M, K] @ b [..., K, N] -> [..., M, N] with the batch dims broadcast (NumPy rules). A 1-D a [K] is
// taken as [1, K] and a 1-D b [K] as [K, 1]; the dimension added for them is dropped from the result, as in
// NumPy (vector . vector gives a 0-d tensor). Both operands have the same dtype (F32, F16 or BF16); products are
// summed in f32 and the result has the operands' dtype.
Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined("matmul", "a", a);
  check_defined("matmul", "b", b);
  Device& device = common_device("matmul", {&a, &b});
  RBEE_CHECK(a.rank() >= 1 && b.rank() >= 1, "matmul: operands need at least one dimension, got a {} and b {}",
             a.shape().to_string(), b.shape().to_string());
  RBEE_CHECK(a.dtype() == b.dtype(), "matmul: a is {} but b is {}; cast one first", dtype_name(a.dtype()),
             dtype_name(b.dtype()));
  check_supported("matmul", device, OpKind::Matmul, {a.dtype(), b.dtype(), a.dtype()});

  const Tensor a2 = a.rank() == 1 ? a.unsqueeze(0) : a;   // [K] -> [1, K]
  const Tensor b2 = b.rank() == 1 ? b.unsqueeze(1) : b;   // [K] -> [K, 1]
  const int64_t m = a2.dim(-2), k = a2.dim(-1), n = b2.dim(-1);
  RBEE_CHECK(b2.dim(-2) == k, "matmul: a {} and b {} do not line up: a has {} columns but b has {} rows",
             a.shape().to_string(), b.shape().to_string(), k, b2.dim(-2));

  Shape a_batch, b_batch;
  for (int d = 0; d < a2.rank() - 2; ++d) a_batch.push_back(a2.shape()[d]);
  for (int d = 0; d < b2.rank() - 2; ++d) b_batch.push_back(b2.shape()[d]);
  Shape batch;
  try {
    batch = broadcast_shapes(a_batch, b_batch);
  } catch (Error& e) {
    throw e.add_context(fmt::format("matmul: batch dims of a {} and b {}", a.shape().to_string(),
                                    b.shape().to_string()));
  }

  Shape a_shape = batch, b_shape = batch, out_shape = batch;
  a_shape.push_back(m);
  a_shape.push_back(k);
  b_shape.push_back(k);
  b_shape.push_back(n);
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, a.dtype(), device);
  device.kernels().matmul(a2.expand(a_shape), b2.expand(b_shape), out);

  if (a.rank() == 1 || b.rank() == 1) {
    Shape result = batch;
    if (a.rank() != 1) result.push_back(m);
    if (b.rank() != 1) result.push_back(n);
    return out.view(result);
  }
  return out;
}

}  // namespace rbee::ops
