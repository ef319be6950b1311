// all_reduce_add_rms_norm_qmatmul (rbee/backend/reduce_norm.h): the communicator's fused pass, or the composition.
#include "rbee/backend/reduce_norm.h"

#include <atomic>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee {

namespace {
std::atomic<uint64_t> g_fused{0};
}  // namespace

ReduceNormQMatmul::~ReduceNormQMatmul() = default;

uint64_t fused_reduce_norms() { return g_fused.load(); }

std::pair<Tensor, Tensor> all_reduce_add_rms_norm_qmatmul(Communicator& comm, int rank, const Tensor& x,
                                                          const Tensor& residual, const Tensor& norm_weight, float eps,
                                                          const Tensor& w, const ReduceExtras& extras) {
  check_reduce_extras(comm, rank, x, extras);
  if (auto* own = dynamic_cast<ReduceNormQMatmul*>(&comm);
      own && x.rank() == 2 && w.rank() == 2 && (!residual.defined() || x.shape() == residual.shape())) {
    Device& device = x.device();
    const Tensor sum_out = Tensor::empty(x.shape(), DType::F32, device);
    const Tensor out = Tensor::empty({x.dim(0), w.dim(0)}, DType::F32, device);
    if (own->all_reduce_add_rms_norm_qmatmul(rank, x, extras.addend, residual, norm_weight, eps, w, sum_out, out)) {
      g_fused.fetch_add(1);
      return {sum_out, out};
    }
  }
  all_reduce_sum_with(comm, rank, x, extras);
  if (residual.defined()) return ops::add_rms_norm_qmatmul(residual, x, norm_weight, eps, w);
  return {x, ops::rms_norm_qmatmul(x, norm_weight, eps, w)};
}

}  // namespace rbee
