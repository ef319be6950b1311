// Gathering columns over a Communicator's ranks (tensor parallelism: a head cut by vocabulary rows hands every
// rank the logits). A communicator may implement ColumnGather to send each rank's own columns alone (the host
// communicator, the GPU backends' peer-to-peer kernels); all_gather_columns() uses it where it does and otherwise
// zeroes the columns a rank does not own and calls all_reduce_sum (x + 0 is x, except that -0 becomes +0).
#pragma once

#include <cstdint>
#include <span>

#include "rbee/backend/communicator.h"

namespace rbee {

class ColumnGather {
 public:
  virtual ~ColumnGather();
  // x [rows, cols] (F32, contiguous, the same shape on every rank, on the rank's device): rank p owns columns
  // [bounds[p], bounds[p + 1]) of every row (size() + 1 ascending bounds from 0 to cols, the same on every rank).
  // Afterwards every rank's x holds every owner's columns, bit for bit; what a rank held outside its own columns
  // is never read. Called by every rank's thread, in the same order as its other collectives; ordered with the
  // device's kernels like all_reduce_sum, and recordable into graphs where the communicator's all_reduce_sum is.
  virtual void all_gather_columns(int rank, const Tensor& x, std::span<const int64_t> bounds) = 0;
};

// ColumnGather::all_gather_columns through comm: its own where comm implements ColumnGather, else the zeroed
// columns and comm.all_reduce_sum (the contract above either way).
void all_gather_columns(Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds);

// The fallback above: the columns rank does not own set to zero in x, then comm.all_reduce_sum(rank, x).
void gather_columns_by_sum(Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds);

// Throws InvalidArgument unless rank, x and bounds meet the contract above on comm.
void check_gather_columns(const Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds);

}  // namespace rbee
