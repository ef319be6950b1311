#include "llm/models/overlapped_reduce.h"

#include <atomic>

#include "llm/models/blocks.h"
#include "rbee/backend/side_stream.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::llm {

namespace {
std::atomic<uint64_t> g_overlapped{0};
}  // namespace

int64_t overlap_first_part(int64_t out, int percent) {
  const int64_t first = out * percent / 100 / 16 * 16;
  return first > 0 && first < out ? first : 0;
}

uint64_t overlapped_reductions() { return g_overlapped.load(std::memory_order_relaxed); }

Tensor reduce_in_halves(const StepContext& step, const Tensor& w, const Tensor& residual, const ReduceExtras& extras,
                        RowBlockProduct product) {
  RBEE_CHECK(!extras.addend.defined(), "reduce_in_halves: pass the residual, not an addend");
  const int64_t out = w.dim(0);
  const int64_t h = overlap_first_part(out, step.tp_overlap_first_percent);
  if (!step.comm || h == 0) return reduce_partial(step, product(w, residual), extras);
  const auto part = [&](const Tensor& t, int axis, int64_t start, int64_t len) {
    return t.defined() ? t.narrow(axis, start, len) : Tensor();
  };
  g_overlapped.fetch_add(1, std::memory_order_relaxed);
  const Tensor pa = product(w.narrow(0, 0, h), part(residual, 1, 0, h));
  Device& device = pa.device();
  // The side stream where the all-reduce records into graphs (its peer-to-peer kernels allocate nothing, which
  // side work must not: side_stream.h); elsewhere (the host communicator, a library) in issue order.
  const bool side = step.comm->capturable();
  if (side) {
    SideSection section(device);
    reduce_partial(step, pa);
  } else {
    reduce_partial(step, pa);
  }
  const Tensor pb = product(w.narrow(0, h, out - h), part(residual, 1, h, out - h));
  if (side) join_side(device);
  reduce_partial(step, pb, ReduceExtras{Tensor(), extras.next_read});
  Tensor y = Tensor::empty({pa.dim(0), out}, DType::F32, device);
  ops::copy(y.narrow(1, 0, h), pa);
  ops::copy(y.narrow(1, h, out - h), pb);
  return y;
}

}  // namespace rbee::llm
