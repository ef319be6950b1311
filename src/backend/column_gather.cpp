// all_gather_columns (rbee/backend/column_gather.h): the communicator's own gather, or zeros and one all-reduce.
#include "rbee/backend/column_gather.h"

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee {

ColumnGather::~ColumnGather() = default;

void check_gather_columns(const Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds) {
  RBEE_CHECK(rank >= 0 && rank < comm.size(), "all_gather_columns: rank {} of {}", rank, comm.size());
  RBEE_CHECK(x.dtype() == DType::F32 && x.is_contiguous() && x.rank() == 2,
             "all_gather_columns: needs a contiguous f32 [rows, cols] tensor, got {}", x.to_string());
  RBEE_CHECK(&x.device() == &comm.device(rank), "all_gather_columns: rank {} passed a tensor on {}, not {}", rank,
             x.device().id(), comm.device(rank).id());
  RBEE_CHECK((int)bounds.size() == comm.size() + 1 && bounds.front() == 0 && bounds.back() == x.dim(1),
             "all_gather_columns: {} column bounds from {} to {} for {} ranks and {} columns", bounds.size(),
             bounds.empty() ? 0 : bounds.front(), bounds.empty() ? 0 : bounds.back(), comm.size(), x.dim(1));
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    RBEE_CHECK(bounds[p] <= bounds[p + 1], "all_gather_columns: column bounds must ascend ({} before {})", bounds[p],
               bounds[p + 1]);
  }
}

void all_gather_columns(Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds) {
  if (auto* own = dynamic_cast<ColumnGather*>(&comm)) return own->all_gather_columns(rank, x, bounds);
  gather_columns_by_sum(comm, rank, x, bounds);
}

void gather_columns_by_sum(Communicator& comm, int rank, const Tensor& x, std::span<const int64_t> bounds) {
  check_gather_columns(comm, rank, x, bounds);
  for (int p = 0; p < comm.size(); ++p) {
    const int64_t width = bounds[(size_t)p + 1] - bounds[(size_t)p];
    if (p != rank && width > 0 && x.dim(0) > 0) ops::const_set(x.narrow(1, bounds[(size_t)p], width), 0.0);
  }
  comm.all_reduce_sum(rank, x);
}

}  // namespace rbee
