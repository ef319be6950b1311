// A tensor split's all-reduce and the norm + projection after it in one pass where a communicator can: the attention
// output's partial sums, the residual add, the MLP's RMS norm and its first projection (add_rms_norm_qmatmul).
// The GPU communicator does the all-reduce, the add and the norm in one kernel that writes the 16-bit rows its
// vendor GEMM reads (one launch and one pass over the rows fewer than all_reduce_sum and the norm's own pass).
#pragma once

#include <cstdint>
#include <utility>

#include "rbee/backend/reduce_with.h"

namespace rbee {

class ReduceNormQMatmul {
 public:
  virtual ~ReduceNormQMatmul();
  // With s = (x_0 [+ addend]) + x_1 + ... + x_{size-1} (f32, in rank order: all_reduce_sum_with's bits; the addend is
  // rank 0's alone) and h = residual + s (or s where residual is undefined):
  //   sum_out = h,   out = rms_norm(h, norm_weight, eps) . w^T
  // the values of all_reduce_sum_with(x) followed by add_rms_norm_qmatmul(residual, x, norm_weight, eps, w) (or
  // rms_norm_qmatmul(x, norm_weight, eps, w)). x: this rank's partial [rows, K] F32 contiguous (left as it was or
  // used as scratch); addend and residual [rows, K] F32 contiguous or undefined, the residual the same on every rank;
  // sum_out [rows, K] and out [rows, N] F32 contiguous, allocated by the caller. Returns false, having done nothing,
  // where this communicator has no such pass for these operands; the answer depends only on shapes, dtypes and
  // settings, so every rank gets the same one.
  virtual bool all_reduce_add_rms_norm_qmatmul(int rank, const Tensor& x, const Tensor& addend,
                                               const Tensor& residual, const Tensor& norm_weight, float eps,
                                               const Tensor& w, const Tensor& sum_out, const Tensor& out) = 0;
};

// (sum_out, out) as above: the communicator's own pass where it has one, else all_reduce_sum_with(x, extras), then
// ops::add_rms_norm_qmatmul(residual, x, ...) or, with residual undefined, (x, ops::rms_norm_qmatmul(x, ...)).
// extras: rank 0's addend and the all-reduce's next_read hint.
std::pair<Tensor, Tensor> all_reduce_add_rms_norm_qmatmul(Communicator& comm, int rank, const Tensor& x,
                                                          const Tensor& residual, const Tensor& norm_weight, float eps,
                                                          const Tensor& w, const ReduceExtras& extras);

// How many times the fused pass ran in this process (tests: the switch did what it says).
uint64_t fused_reduce_norms();

}  // namespace rbee
