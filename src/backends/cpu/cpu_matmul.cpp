// CPU matmul: a batch of products over broadcast batch dimensions, each one a cpu::gemm call that reads the
// operands through their strides (transposed, strided and broadcast views are never copied).
#include <algorithm>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/gemm.h"

namespace rbee::cpu {

namespace {

// Element offsets of one operand for every batch index of out: out's batch dims are aligned right with the
// operand's; a missing or size-1 dim repeats the operand (stride 0).
Strides batch_strides(const Tensor& t, int out_batch_rank) {
  Strides s = Strides::filled(out_batch_rank, 0);
  const int t_batch_rank = t.rank() - 2;
  for (int d = 0; d < out_batch_rank; ++d) {
    const int td = d - (out_batch_rank - t_batch_rank);
    if (td >= 0 && t.shape()[td] != 1) s[d] = t.strides()[td];
  }
  return s;
}

// Batches whose products are each smaller than this run one product per task instead of spreading every
// product over the threads.
constexpr double kSmallProductMacs = 128.0 * 128.0 * 128.0;

}  // namespace

// a [..., M, K], b [..., K, N]: any strides, batch dims broadcast to out's. out [..., M, N] contiguous.
void CpuKernels::matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  const int rank = out.rank();
  RBEE_ASSERT(rank >= 2 && a.rank() >= 2 && b.rank() >= 2, "matmul kernel needs rank >= 2 operands, got {} {} {}",
              a.rank(), b.rank(), rank);
  const int64_t m = out.dim(-2), n = out.dim(-1), k = a.dim(-1);
  const int batch_rank = rank - 2;
  Shape batch_shape = Shape::filled(batch_rank, 1);
  for (int d = 0; d < batch_rank; ++d) batch_shape[d] = out.shape()[d];
  const int64_t batch = batch_shape.numel();
  if (batch == 0 || m == 0 || n == 0) return;

  const Strides a_bs = batch_strides(a, batch_rank), b_bs = batch_strides(b, batch_rank);
  const int64_t es = dtype_type_size(a.dtype());
  const auto* a_base = static_cast<const char*>(a.data());
  const auto* b_base = static_cast<const char*>(b.data());
  auto* out_base = static_cast<char*>(out.data());

  auto run_one = [&](int64_t index, bool parallel) {
    int64_t a_off = 0, b_off = 0, rem = index;
    for (int d = batch_rank - 1; d >= 0; --d) {
      const int64_t i = rem % batch_shape[d];
      rem /= batch_shape[d];
      a_off += i * a_bs[d];
      b_off += i * b_bs[d];
    }
    const GemmOperand ga{a_base + a_off * es, a.dtype(), a.stride(-2), a.stride(-1)};
    const GemmOperand gb{b_base + b_off * es, b.dtype(), b.stride(-2), b.stride(-1)};
    const GemmResult gc{out_base + index * m * n * dtype_type_size(out.dtype()), out.dtype(), n};
    gemm(m, n, k, ga, gb, gc, {.accumulate = false, .parallel = parallel});
  };

  const double macs = (double)m * (double)n * (double)k;
  if (batch > 1 && macs < kSmallProductMacs) {
    ThreadPool::global().run(batch, [&](int64_t index) { run_one(index, false); });
  } else {
    for (int64_t index = 0; index < batch; ++index) run_one(index, true);
  }
}

}  // namespace rbee::cpu
