// CPU fused linear layer (op_table.def LinearFused): one cpu::gemm into f32 sums, then bias and residual added to
// each sum and the result rounded once.
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/gemm.h"

namespace rbee::cpu {

// x [M, K], w [N, K], bias [N] or null, residual [M, N] or null, out [M, N]; contiguous, one dtype.
void CpuKernels::linear_fused(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                              Tensor& out) {
  const int64_t m = out.dim(0), n = out.dim(1), k = x.dim(1);
  if (m == 0 || n == 0) return;
  std::vector<float> sum((size_t)(m * n));
  const GemmOperand ga{x.data(), x.dtype(), k, 1};
  const GemmOperand gb{w.data(), w.dtype(), 1, k};  // w^T: element (kk, j) at w + j * k + kk
  const GemmResult gc{sum.data(), DType::F32, n};
  gemm(m, n, k, ga, gb, gc, {.accumulate = false, .parallel = true});
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      RBEE_THROW(ErrorCode::Unsupported, "linear_fused: F64 is not supported");
    } else {
      const T* bp = bias ? static_cast<const T*>(bias->data()) : nullptr;
      const T* rp = residual ? static_cast<const T*>(residual->data()) : nullptr;
      T* op = static_cast<T*>(out.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          float v = sum[(size_t)(i * n + j)];
          if (bp) v += (float)load(bp[j]);
          if (rp) v += (float)load(rp[i * n + j]);
          op[i * n + j] = store<T>(v);
        }
      }
    }
  });
}

}  // namespace rbee::cpu
