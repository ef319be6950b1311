// GpuKernels::qmatmul: out[M, N] f32 = x[M, K] f32 . w[N, K]^T, w packed (any block type) or F32/F16/BF16.
//
// Semantics are the CPU's (rbee/backend/kernels.h): block-type weights multiply x quantized to the paired 8-bit
// activation format (Q8_0-style 32-blocks for legacy types, Q8_1 for Q4_1 / Q5_1, Q8_K-style 256-blocks for
// K-quants), so a block dot product is an integer sum; F16 / BF16 weights multiply x rounded to their own type,
// products exact and summed in f32; F32 weights multiply x in f32. So results do not depend on M or on the path
// below beyond the order of the f32 sums.
//
// Paths:
//  - Block types (activations quantized once on the GPU, quant_activation.cu), M < kMmqMinRows (decode): the
//    matvec kernels (quant_matvec.cuh, dot4), each launch streaming the packed weights once. M >= kMmqMinRows
//    (batched decode, prompts): MMQ (quant_mmq.cuh), int8 tensor-core tile products of the quantized activations
//    and the weights decoded into shared memory, one kernel after the quantizer (which also zeroes MMQ's split-K
//    counters); no vendor BLAS. RBEE_MMQ_MIN_ROWS=N moves the threshold
//    (measurements of the crossover; N > M everywhere keeps the matvec).
//  - Float weights, M <= kMatvecMaxRows (decode): quant_gemv_float.cu, one launch, x rounded to the weight's
//    type in registers. Larger M with a vendor BLAS (batched decode, prompts): x rounded to the weight's type
//    once, then ONE 16-bit tensor-core GEMM with f32 accumulation and f32 output (cuBLAS / rocBLAS), the
//    weights used in place; F32 weights take an f32 GEMM (no TF32). Without BLAS (ROCm without rocBLAS) or if
//    it refuses: the gemv for every M.
#include <algorithm>
#include <cstdlib>
#include <limits>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu {

namespace {

// Block types: MMQ from this many rows (quant::kMmqMinRows unless RBEE_MMQ_MIN_ROWS says otherwise).
int64_t mmq_min_rows() {
  static const int64_t rows = [] {
    const char* env = std::getenv("RBEE_MMQ_MIN_ROWS");
    return env != nullptr && std::atoll(env) > 0 ? (int64_t)std::atoll(env) : quant::kMmqMinRows;
  }();
  return rows;
}

// x with a 16-byte aligned base (the kernels load it with 16-byte vectors): x itself or an aligned copy.
Tensor aligned_rows(const Tensor& x, GpuDevice& device) {
  if (reinterpret_cast<uintptr_t>(x.data()) % 16 == 0) return x;
  Tensor copy = Tensor::empty(x.shape(), x.dtype(), device);
  RBEE_GPU_CHECK(memcpy_async(copy.data(), x.data(), (size_t)x.nbytes(), device.stream()));
  return copy;
}

// out = x.w^T for F32 weights, round16(x).w^T for F16 / BF16 weights: one GEMM, f32 accumulation and output.
bool blas_float(GpuDevice& device, const Tensor& x, const Tensor& w, float* out) {
  Blas* blas = device.blas();
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (w.dtype() == DType::F32) {
    return blas->gemm_f32_out(DType::F32, false, true, (int)m, (int)n, (int)k, x.data(), k, w.data(), k, out, n, 0.f,
                              device.stream());
  }
  Tensor xr = Tensor::empty({m, k}, w.dtype(), device);
  quant::launch_round_to_half(device, w.dtype(), static_cast<const float*>(x.data()), m * k,
                              static_cast<uint16_t*>(xr.data()));
  return blas->gemm_f32_out(w.dtype(), false, true, (int)m, (int)n, (int)k, xr.data(), k, w.data(), k, out, n, 0.f,
                            device.stream());
}

// Dimensions the vendor BLAS takes as int.
bool fits_blas(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  return m <= kMax && n <= kMax && k <= kMax;
}

}  // namespace

namespace quant {
void launch_quant_matvec(GpuDevice& device, DType type, const QmvArgs& args) {
  visit_block_type(type, [&](auto tag) { launch_quant_matvec_typed<decltype(tag)::value>(device, args); });
}
void launch_mmq(GpuDevice& device, DType type, const MmqArgs& args) {
  visit_block_type(type, [&](auto tag) { launch_mmq_typed<decltype(tag)::value>(device, args); });
}
}  // namespace quant

void GpuKernels::qmatmul(const Tensor& x, const Tensor& w, Tensor& out) {
  device_.activate();
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (m == 0 || n == 0) return;
  float* dst = static_cast<float*>(out.data());
  if (k == 0) {
    RBEE_GPU_CHECK(memset_async(dst, 0, (size_t)(m * n) * sizeof(float), device_.stream()));
    return;
  }
  const Tensor xa = aligned_rows(x, device_);
  const float* xp = static_cast<const float*>(xa.data());
  const bool blas_ok = device_.blas() != nullptr && fits_blas(m, n, k);

  if (is_quantized(w.dtype())) {
    Tensor scratch;
    const bool mmq = m >= mmq_min_rows();
    const quant::QActs acts = quant::quantize_activations(device_, xp, m, k, dtype_block_size(w.dtype()) == 256,
                                                          scratch, mmq ? quant::kMmqCounters : 0);
    const int64_t row_bytes = dtype_row_bytes(w.dtype(), k);
    const auto* wp = static_cast<const uint8_t*>(w.data());
    if (mmq) {
      quant::launch_mmq(device_, w.dtype(), {wp, n, k, row_bytes, acts, m, dst, n, acts.zeroed});
      return;
    }
    for (int64_t m0 = 0; m0 < m; m0 += quant::kQuantMatvecMaxRows) {
      const quant::QActs rows{acts.q + m0 * k, acts.d + m0 * (k / 32), acts.s + m0 * (k / 16), k};
      const int mc = (int)std::min<int64_t>(quant::kQuantMatvecMaxRows, m - m0);
      quant::launch_quant_matvec(device_, w.dtype(), {wp, n, k, row_bytes, rows, mc, dst + m0 * n, n});
    }
    return;
  }

  // More rows than one gemv launch takes: the GEMM reads the weights once (batched decode from 9 sequences on).
  if (m > quant::kMatvecMaxRows && blas_ok && blas_float(device_, xa, w, dst)) return;
  for (int64_t m0 = 0; m0 < m; m0 += quant::kMatvecMaxRows) {
    const int mc = (int)std::min<int64_t>(quant::kMatvecMaxRows, m - m0);
    quant::launch_float_gemv(device_, w.dtype(), {w.data(), n, k, xp + m0 * k, mc, dst + m0 * n, n});
  }
}

}  // namespace rbee::gpu
