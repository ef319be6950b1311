// all_reduce_sum_with (rbee/backend/reduce_with.h): the communicator's own, or the addend by an op and all_reduce_sum.
#include "rbee/backend/reduce_with.h"

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee {

ReduceWith::~ReduceWith() = default;

void check_reduce_extras(const Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras) {
  RBEE_CHECK(rank >= 0 && rank < comm.size(), "all_reduce_sum_with: rank {} of {}", rank, comm.size());
  const Tensor& addend = extras.addend;
  if (!addend.defined()) return;
  RBEE_CHECK(rank == 0, "all_reduce_sum_with: rank {} passed an addend (rank 0 alone does)", rank);
  RBEE_CHECK(addend.dtype() == DType::F32 && addend.is_contiguous() && addend.shape() == x.shape(),
             "all_reduce_sum_with: the addend must be a contiguous f32 tensor of x's shape {}, got {}", x.to_string(),
             addend.to_string());
  RBEE_CHECK(&addend.device() == &comm.device(rank), "all_reduce_sum_with: the addend is on {}, not {}",
             addend.device().id(), comm.device(rank).id());
}

void add_then_reduce(Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras) {
  check_reduce_extras(comm, rank, x, extras);
  if (extras.addend.defined()) ops::copy(x, ops::add(x, extras.addend));
  comm.all_reduce_sum(rank, x);
}

void all_reduce_sum_with(Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras) {
  if (auto* own = dynamic_cast<ReduceWith*>(&comm)) return own->all_reduce_sum_with(rank, x, extras);
  add_then_reduce(comm, rank, x, extras);
}

}  // namespace rbee
