// all_reduce_sum with extras: rank 0's addend added once, and a hint of what each rank reads next. A communicator
// may implement it (ReduceWith); otherwise rank 0 adds the addend with an op and the sum is all_reduce_sum.
#pragma once

#include "rbee/backend/communicator.h"

namespace rbee {

// What an all-reduce may do besides the sum.
struct ReduceExtras {
  // Rank 0 alone (the other ranks leave it undefined): F32, contiguous, x's shape, on rank 0's device, added to
  // rank 0's partial before the reduction, x := (x_0 + addend) + x_1 + ... + x_{size-1}: a residual that is the
  // same on every rank, added once.
  Tensor addend;
  // Any rank: a tensor on the rank's device that it reads right after the all-reduce (the next projection's
  // weights). A hint: a GPU communicator asks for its first bytes in L2 while its kernel waits on the link, when
  // the memory would otherwise idle. Never changes a result.
  Tensor next_read;
};

// A communicator's own all_reduce_sum with extras (the GPU communicator: inside its peer-to-peer kernels).
class ReduceWith {
 public:
  virtual ~ReduceWith();
  // Every rank receives the same bits; the contract of Communicator::all_reduce_sum otherwise.
  virtual void all_reduce_sum_with(int rank, const Tensor& x, const ReduceExtras& extras) = 0;
};

// The extras' checks (the addend: rank 0 alone; f32, contiguous, x's shape, on the rank's device); throws Error.
void check_reduce_extras(const Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras);

// comm's own all_reduce_sum_with where it implements ReduceWith; else the checks, rank 0 adds the addend (ops::add,
// copied back into x), and all_reduce_sum (the hint is dropped).
void all_reduce_sum_with(Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras);
// The fallback alone (for implementations that cannot add inside their own path).
void add_then_reduce(Communicator& comm, int rank, const Tensor& x, const ReduceExtras& extras);

}  // namespace rbee
