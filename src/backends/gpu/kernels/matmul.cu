// GPU matmul: a [..., M, K] . b [..., K, N] -> out [..., M, N] (batch dims broadcast to out's), F32/F16/BF16
// with f32 accumulation.
//
// With a vendor Blas (cuBLAS; rocBLAS when installed) each operand is handed over through its strides when
// they form a (possibly transposed) BLAS matrix, and batch dims become strided-batched calls (gemm.cu merges
// the nesting ones, broadcasts included, and loops over the rest). An operand whose last two axes are not a
// BLAS matrix (e.g. every other element) is copied to a contiguous tensor first. Without a Blas, or when it
// refuses the product, rbee's tiled kernel reads the original strides directly.
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/gemm.h"

namespace rbee::gpu {

namespace {

// Element strides of operand t for each of out's batch dims (aligned right; missing or size-1 dims repeat).
void batch_strides(const Tensor& t, int out_batch_rank, int64_t* strides) {
  const int t_batch_rank = t.rank() - 2;
  for (int d = 0; d < out_batch_rank; ++d) {
    const int td = d - (out_batch_rank - t_batch_rank);
    strides[d] = (td >= 0 && t.dim(td) != 1) ? t.stride(td) : 0;
  }
}

GemmSpec matmul_spec(const Tensor& a, const Tensor& b, Tensor& out) {
  GemmSpec s;
  s.dtype = a.dtype();
  s.m = out.dim(-2);
  s.n = out.dim(-1);
  s.k = a.dim(-1);
  s.batch_rank = out.rank() - 2;
  for (int d = 0; d < s.batch_rank; ++d) {
    s.batch_shape[d] = out.dim(d);
    s.c.batch_strides[d] = out.stride(d);
  }
  s.a = {a.data(), a.stride(-2), a.stride(-1), {}};
  batch_strides(a, s.batch_rank, s.a.batch_strides);
  s.b = {b.data(), b.stride(-2), b.stride(-1), {}};
  batch_strides(b, s.batch_rank, s.b.batch_strides);
  s.c.data = out.data();
  s.c.rs = out.stride(-2);
  s.c.cs = 1;
  return s;
}

bool blas_matrix(const Tensor& t) {
  bool trans = false;
  int64_t ld = 0;
  return blas_layout(t.dim(-2), t.dim(-1), t.stride(-2), t.stride(-1), &trans, &ld);
}

}  // namespace

void GpuKernels::matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  RBEE_ASSERT(a.rank() >= 2 && b.rank() >= 2 && out.rank() >= 2 && out.is_contiguous(),
              "matmul kernel needs rank >= 2 operands and a contiguous out");
  if (device_.blas() && a.dim(-1) > 0) {
    // Copies only for operands the library cannot read in place.
    const Tensor ac = blas_matrix(a) ? a : a.contiguous();
    const Tensor bc = blas_matrix(b) ? b : b.contiguous();
    if (gemm_blas(device_, matmul_spec(ac, bc, out))) return;
  }
  gemm_rbee(device_, matmul_spec(a, b, out));
}

}  // namespace rbee::gpu
