// GpuKernels::qmatmul: out[M, N] f32 = x[M, K] f32 . w[N, K]^T, w packed (any block type) or F32/F16/BF16.
//
// Semantics are the CPU's (rbee/backend/kernels.h): block-type weights multiply x quantized to the paired 8-bit
// activation format (Q8_0-style 32-blocks for legacy types, Q8_K-style 256-blocks for K-quants); F16 / BF16
// weights multiply x rounded to their own type, products exact and summed in f32; F32 weights multiply x in
// f32. So results do not depend on M or on the path below beyond the order of the f32 sums.
//
// Paths:
//  - Block types, M <= kQuantMatvecMaxM (decode, batched decode of up to 128 sequences): activations quantized
//    once, then the matvec kernels (quant_matvec.cuh) in launches of up to kQuantMatvecMaxRows (16) rows; each
//    launch streams the packed weights once. Larger M with a vendor BLAS: weights dequantized tile by tile and
//    split into bf16 hi + lo, activations likewise, then three bf16 tensor-core GEMMs with f32 output
//    accumulate hi.hi + lo.hi + hi.lo (quant_split.cu: ~2^-16 per product, the 8-bit activations' values kept).
//  - Float weights, M <= kMatvecMaxRows (decode): quant_gemv_float.cu, one launch, x rounded to the weight's
//    type in registers. Larger M with a vendor BLAS (batched decode, prompts): x rounded to the weight's type
//    once, then ONE 16-bit tensor-core GEMM with f32 accumulation and f32 output (cuBLAS / rocBLAS), the
//    weights used in place; F32 weights take an f32 GEMM (no TF32).
//  - Without BLAS (ROCm without rocBLAS) or if it refuses: the matvec kernels for every M.
#include <algorithm>
#include <limits>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu {

namespace {

// Block types stay on the matvec kernels up to this many rows: 8 launches of 16 rows read 8 x the packed
// weights (4.5 bits per weight for Q4_0), less than the BLAS path's split weights (4 bytes written and read
// per weight, plus three GEMMs), so batched decode of up to 128 sequences is faster there.
constexpr int64_t kQuantMatvecMaxM = 128;
// Scratch for one tile of split weights (hi + lo bf16 = 4 bytes per weight).
constexpr int64_t kSplitTileBytes = int64_t{64} << 20;

// x with a 16-byte aligned base (the kernels load it with 16-byte vectors): x itself or an aligned copy.
Tensor aligned_rows(const Tensor& x, GpuDevice& device) {
  if (reinterpret_cast<uintptr_t>(x.data()) % 16 == 0) return x;
  Tensor copy = Tensor::empty(x.shape(), x.dtype(), device);
  RBEE_GPU_CHECK(memcpy_async(copy.data(), x.data(), (size_t)x.nbytes(), device.stream()));
  return copy;
}

bool blas_quantized(GpuDevice& device, const quant::QActs& acts, const Tensor& w, int64_t m, float* out) {
  Blas* blas = device.blas();
  const int64_t n = w.dim(0), k = w.dim(1);
  const int64_t row_bytes = dtype_row_bytes(w.dtype(), k);
  Tensor xh = Tensor::empty({m, k}, DType::BF16, device), xl = Tensor::empty({m, k}, DType::BF16, device);
  quant::launch_split_activations(device, acts, m, static_cast<uint16_t*>(xh.data()),
                                  static_cast<uint16_t*>(xl.data()));
  const int64_t tile = std::clamp<int64_t>(kSplitTileBytes / (4 * k), 1, n);
  Tensor wh = Tensor::empty({tile, k}, DType::BF16, device), wl = Tensor::empty({tile, k}, DType::BF16, device);
  const auto* wp = static_cast<const uint8_t*>(w.data());
  for (int64_t n0 = 0; n0 < n; n0 += tile) {
    const int64_t rows = std::min(tile, n - n0);
    quant::launch_split_weights(device, w.dtype(), wp + n0 * row_bytes, rows, k, row_bytes,
                                static_cast<uint16_t*>(wh.data()), static_cast<uint16_t*>(wl.data()));
    // out[:, n0:n0+rows] = xh.wh^T + xl.wh^T + xh.wl^T
    const std::pair<const Tensor*, const Tensor*> terms[] = {{&xh, &wh}, {&xl, &wh}, {&xh, &wl}};
    float beta = 0.f;
    for (const auto& [a, b] : terms) {
      if (!blas->gemm_f32_out(DType::BF16, false, true, (int)m, (int)rows, (int)k, a->data(), k, b->data(), k,
                              out + n0, n, beta, device.stream())) {
        return false;
      }
      beta = 1.f;
    }
  }
  return true;
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
    const bool use_blas = m > kQuantMatvecMaxM && blas_ok;
    Tensor scratch;
    const quant::QActs acts =
        quant::quantize_activations(device_, xp, m, k, dtype_block_size(w.dtype()) == 256, scratch);
    if (use_blas && blas_quantized(device_, acts, w, m, dst)) return;
    const int64_t row_bytes = dtype_row_bytes(w.dtype(), k);
    for (int64_t m0 = 0; m0 < m; m0 += quant::kQuantMatvecMaxRows) {
      const quant::QActs rows{acts.q + m0 * k, acts.d + m0 * (k / 32), acts.s + m0 * (k / 16), k};
      const int mc = (int)std::min<int64_t>(quant::kQuantMatvecMaxRows, m - m0);
      quant::launch_quant_matvec(device_, w.dtype(),
                                 {static_cast<const uint8_t*>(w.data()), n, k, row_bytes, rows, mc, dst + m0 * n, n});
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
