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
//    (measurements of the crossover; N > M everywhere keeps the matvec). Batch-invariant mode
//    (batch_invariant.h): the matvec for every M.
//  - Float weights, M <= kMatvecMaxRows (decode): quant_gemv_float.cu, one launch, x rounded to the weight's
//    type in registers. Larger M with a vendor BLAS (batched decode, prompts): x rounded to the weight's type
//    once, then ONE 16-bit tensor-core GEMM with f32 accumulation and f32 output (cuBLAS / rocBLAS), the
//    weights used in place; F32 weights take an f32 GEMM (no TF32). Without BLAS (ROCm without rocBLAS) or if
//    it refuses, or in batch-invariant mode: the gemv for every M. The skinny product (gemm_skinny.h: rbee's
//    16-bit tile-product kernel for 9..64 rows, the weights read once, split over K) takes 16-bit weights at those
//    rows instead where skinny_gemm_takes says so: by default on devices without a vendor BLAS (where the gemv
//    read the weights once per 8 rows), or everywhere with RBEE_SKINNY_GEMM=1.
//
// The fused decoder ops (norm_qmatmul, swiglu_qmatmul; op_table.def) run the same paths after a fused
// activation pass (quant_activation.cu): norm_qmatmul quantizes rms_norm(x [+ residual]) in one launch,
// swiglu_qmatmul quantizes silu(gate) * up of a stacked gate/up row in one launch and adds its residual in the
// matvec / gemv epilogue. Every activation pass also asks for the first kPrefetchCap bytes of the weights in L2,
// so a decode step's matvec starts on warm lines.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string_view>

#include "backends/common/batch_invariant.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/gemm_skinny.h"
#include "backends/gpu/kernels/half_rows.h"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_gemv_fused.h"
#include "backends/gpu/kernels/quant_launch.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

// Block types: MMQ from this many rows (quant::kMmqMinRows unless RBEE_MMQ_MIN_ROWS says otherwise).
int64_t mmq_min_rows() {
  static const int64_t rows = env::integer_or("RBEE_MMQ_MIN_ROWS", quant::kMmqMinRows, 1);
  return rows;
}

// x with a 16-byte aligned base (the kernels load it with 16-byte vectors): x itself or an aligned copy.
Tensor aligned_rows(const Tensor& x, GpuDevice& device) {
  if (reinterpret_cast<uintptr_t>(x.data()) % 16 == 0) return x;
  Tensor copy = Tensor::empty(x.shape(), x.dtype(), device);
  RBEE_GPU_CHECK(memcpy_async(copy.data(), x.data(), (size_t)x.nbytes(), device.stream()));
  return copy;
}

// Whether an m-row product with 16-bit weights w takes the skinny product (gemm_skinny.h): more rows than one gemv
// launch takes, decode batch sizes, the switch, w 16-byte aligned; never in batch-invariant mode (its split-K order
// depends on M).
bool takes_skinny(GpuDevice& device, int64_t m, const Tensor& w) {
  return m > quant::kMatvecMaxRows && !batch_invariant() &&
         skinny_gemm_takes(device, w.dtype(), m, w.dim(0), w.dim(1)) && reinterpret_cast<uintptr_t>(w.data()) % 16 == 0;
}

// out [m, N] = xh . w^T (+ residual, when not null) through the skinny product; xh [m, K] in w's 16-bit type,
// 16-byte aligned.
void skinny_half(GpuDevice& device, const Tensor& xh, const Tensor& w, float* out, const float* residual) {
  SkinnyGemmArgs a;
  a.type = w.dtype();
  a.x = static_cast<const uint16_t*>(xh.data());
  a.w = static_cast<const uint16_t*>(w.data());
  a.residual = residual;
  a.out = out;
  a.m = xh.dim(0), a.n = w.dim(0), a.k = w.dim(1);
  launch_skinny_gemm(device, a);
}

// round16(x) [m, K] in w's 16-bit type (the products' operand).
Tensor rounded_rows(GpuDevice& device, const Tensor& x, DType type) {
  const int64_t m = x.dim(0), k = x.dim(1);
  Tensor xr = Tensor::empty({m, k}, type, device);
  quant::launch_round_to_half(device, type, static_cast<const float*>(x.data()), m * k,
                              static_cast<uint16_t*>(xr.data()));
  return xr;
}

// out = x.w^T for F32 weights, round16(x).w^T for F16 / BF16 weights: one GEMM, f32 accumulation and output.
bool blas_float(GpuDevice& device, const Tensor& x, const Tensor& w, float* out) {
  Blas* blas = device.blas();
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (w.dtype() == DType::F32) {
    return blas->gemm_f32_out(DType::F32, false, true, (int)m, (int)n, (int)k, x.data(), k, w.data(), k, out, n, 0.f,
                              device.stream());
  }
  const Tensor xr = rounded_rows(device, x, w.dtype());
  return blas->gemm_f32_out(w.dtype(), false, true, (int)m, (int)n, (int)k, xr.data(), k, w.data(), k, out, n, 0.f,
                            device.stream());
}

// Dimensions the vendor BLAS takes as int.
bool fits_blas(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  return m <= kMax && n <= kMax && k <= kMax;
}

// Cap of the L2 prefetch an activation pass issues for the weights of the launch after it (L2 is 50 MB on H100;
// the matvec's own per-warp prefetches take over beyond this).
constexpr int64_t kPrefetchCap = int64_t{24} << 20;

quant::Prefetch prefetch_of(const Tensor& w) {
  return quant::Prefetch{w.data(), std::min<int64_t>(w.nbytes(), kPrefetchCap)};
}

// Whether an m-row block-type product takes MMQ (never in batch-invariant mode: the matvec's per-row order holds
// for every M, MMQ's tiles and split-K do not match it).
bool use_mmq(int64_t m) { return m >= mmq_min_rows() && !batch_invariant(); }

// The split-K counters the activation pass before an m-row block-type product zeroes: MMQ's, or none (matvec).
int64_t mmq_counters(int64_t m) { return use_mmq(m) ? quant::kMmqCounters : 0; }

// out [m, N] = acts . w^T (+ residual [m, N]) for block weights w: MMQ from mmq_min_rows() rows, else matvec
// launches of up to kQuantMatvecMaxRows rows with the residual added in their epilogue. Returns whether the
// residual was added (MMQ leaves it to the caller).
bool run_quantized(GpuDevice& device, const quant::QActs& acts, const Tensor& w, int64_t m, float* out,
                   const float* residual) {
  const int64_t n = w.dim(0), k = w.dim(1);
  const int64_t row_bytes = dtype_row_bytes(w.dtype(), k);
  const auto* wp = static_cast<const uint8_t*>(w.data());
  if (use_mmq(m)) {
    quant::launch_mmq(device, w.dtype(), {wp, n, k, row_bytes, acts, m, out, n, acts.zeroed});
    return residual == nullptr;
  }
  const bool prefetch = quant::l2_prefetch_enabled();
  for (int64_t m0 = 0; m0 < m; m0 += quant::kQuantMatvecMaxRows) {
    quant::QmvArgs args{};
    args.w = wp;
    args.n = n;
    args.k = k;
    args.row_bytes = row_bytes;
    args.x = quant::QActs{acts.q + m0 * k, acts.d + m0 * (k / 32), acts.s + m0 * (k / 16), k};
    args.m = (int)std::min<int64_t>(quant::kQuantMatvecMaxRows, m - m0);
    args.out = out + m0 * n;
    args.ldo = n;
    args.residual = residual ? residual + m0 * n : nullptr;
    args.prefetch = prefetch;
    quant::launch_quant_matvec(device, w.dtype(), args);
  }
  return true;
}

// out [m, N] = x . w^T (+ residual) for F32 / F16 / BF16 weights, x [m, K] f32 with a 16-byte aligned base:
// one GEMM above kMatvecMaxRows rows when the vendor BLAS takes it, else the gemv kernels (residual in their
// epilogue). Returns whether the residual was added.
bool run_float(GpuDevice& device, const Tensor& x, const Tensor& w, float* out, const float* residual) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (takes_skinny(device, m, w)) {  // x rounded once, then the skinny product
    skinny_half(device, rounded_rows(device, x, w.dtype()), w, out, residual);
    return true;
  }
  const bool blas_ok = device.blas() != nullptr && fits_blas(m, n, k);
  // More rows than one gemv launch takes: the GEMM reads the weights once (batched decode from 9 sequences on);
  // not in batch-invariant mode (the GEMM's per-row order is not the gemv's, and the vendor's depends on M).
  if (m > quant::kMatvecMaxRows && blas_ok && !batch_invariant() && blas_float(device, x, w, out)) {
    return residual == nullptr;
  }
  const float* xp = static_cast<const float*>(x.data());
  const bool prefetch = quant::l2_prefetch_enabled();
  for (int64_t m0 = 0; m0 < m; m0 += quant::kMatvecMaxRows) {
    quant::GemvArgs args{};
    args.w = w.data();
    args.n = n;
    args.k = k;
    args.x = xp + m0 * k;
    args.m = (int)std::min<int64_t>(quant::kMatvecMaxRows, m - m0);
    args.out = out + m0 * n;
    args.ldo = n;
    args.residual = residual ? residual + m0 * n : nullptr;
    args.prefetch = prefetch;
    quant::launch_float_gemv(device, w.dtype(), args);
  }
  return true;
}

// Whether run_float takes the vendor GEMM for an m-row product with w (rows past one gemv launch, a library
// that takes the sizes, not batch-invariant mode).
bool takes_blas(GpuDevice& device, int64_t m, const Tensor& w) {
  return m > quant::kMatvecMaxRows && device.blas() != nullptr && fits_blas(m, w.dim(0), w.dim(1)) &&
         !batch_invariant();
}

// Whether run_float takes a 16-bit GEMM (the skinny product or the vendor's) for an m-row product with w.
bool takes_gemm(GpuDevice& device, int64_t m, const Tensor& w) {
  return takes_blas(device, m, w) || takes_skinny(device, m, w);
}

// Whether a fused source (norm rows, swiglu rows) feeding the vendor GEMM on 16-bit weights is written as 16-bit
// rows directly (launch_norm_rows_half / launch_swiglu_rows_half) instead of f32 rows and a rounding pass: the same
// values (each rounded once from the same f32), one launch less. RBEE_BLAS_HALF_ACTS=0: f32 rows, then the
// rounding pass inside blas_float, as before (for comparisons).
bool half_acts(GpuDevice& device, int64_t m, const Tensor& w) {
  static const bool on = env::flag_or("RBEE_BLAS_HALF_ACTS", true);
  return on && (w.dtype() == DType::F16 || w.dtype() == DType::BF16) && takes_gemm(device, m, w);
}

// out [m, N] = xh . w^T for xh [m, K] already in w's 16-bit type (16-byte aligned): the skinny product, which
// also adds the residual (*added), else the GEMM of blas_float without its rounding pass. False: neither took it.
bool gemm_half(GpuDevice& device, const Tensor& xh, const Tensor& w, float* out, const float* residual,
               bool* added) {
  const int64_t m = xh.dim(0), k = xh.dim(1), n = w.dim(0);
  *added = false;
  if (takes_skinny(device, m, w)) {
    skinny_half(device, xh, w, out, residual);
    *added = residual != nullptr;
    return true;
  }
  if (!takes_blas(device, m, w)) return false;
  return device.blas()->gemm_f32_out(w.dtype(), false, true, (int)m, (int)n, (int)k, xh.data(), k, w.data(), k, out,
                                     n, 0.f, device.stream());
}

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace

namespace quant {
void launch_quant_matvec(GpuDevice& device, DType type, const QmvArgs& args) {
  visit_block_type(type, [&](auto tag) { launch_quant_matvec_typed<decltype(tag)::value>(device, args); });
}
void launch_mmq(GpuDevice& device, DType type, const MmqArgs& args) {
  visit_block_type(type, [&](auto tag) { launch_mmq_typed<decltype(tag)::value>(device, args); });
}
bool l2_prefetch_enabled() {
  static const bool on = env::flag_or("RBEE_L2_PREFETCH", false);
  return on;
}
bool pdl_enabled() {
  static const bool on = env::flag_or("RBEE_PDL", true);
  return on;
}
bool matvec_pairs() {
  static const bool on = env::flag_or("RBEE_MATVEC_PAIRS", false);
  return on && !batch_invariant();  // pairs change the per-row order of M <= 4 launches only
}
int matvec_rows_m1() {
  static const int rows = [] {
    return (int)env::integer_or("RBEE_MATVEC_R", 2, 1, 2);
  }();
  return rows;
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
  if (is_quantized(w.dtype())) {
    Tensor scratch;
    const quant::QActs acts =
        quant::quantize_activations(device_, static_cast<const float*>(xa.data()), m, k,
                                    dtype_block_size(w.dtype()) == 256, scratch, mmq_counters(m), prefetch_of(w));
    run_quantized(device_, acts, w, m, dst, nullptr);
    return;
  }
  run_float(device_, xa, w, dst, nullptr);
}

void GpuKernels::norm_qmatmul(const Tensor& x, const Tensor& w, const Tensor& norm_weight, const Tensor* residual,
                              float eps, Tensor* sum_out, Tensor& out) {
  device_.activate();
  const int64_t m = x.dim(0), k = x.dim(1);
  const float* res = residual ? static_cast<const float*>(residual->data()) : nullptr;
  float* sum = sum_out ? static_cast<float*>(sum_out->data()) : nullptr;
  const bool fused = k % 8 == 0 && aligned16({x.data(), res, norm_weight.data(), sum});
  if (!fused) {  // the composition, unfused
    Tensor h = Tensor::empty({m, k}, DType::F32, device_);
    if (residual) add_rms_norm(x, *residual, norm_weight, eps, *sum_out, h);
    else rms_norm(x, &norm_weight, eps, h);
    qmatmul(h, w, out);
    return;
  }
  const float* xp = static_cast<const float*>(x.data());
  const float* nw = static_cast<const float*>(norm_weight.data());
  float* dst = static_cast<float*>(out.data());
  if (is_quantized(w.dtype())) {
    Tensor scratch;
    const quant::QActs acts =
        quant::quantize_norm_activations(device_, xp, res, nw, eps, m, k, dtype_block_size(w.dtype()) == 256, sum,
                                         scratch, mmq_counters(m), prefetch_of(w));
    run_quantized(device_, acts, w, m, dst, nullptr);
    return;
  }
  // One row: the norm inside the gemv (not in batch-invariant mode: the sum of squares' order differs from the
  // row pass that several rows take).
  if (m == 1 && quant::fused_float_gemv_enabled() && quant::fused_float_gemv_fits(w.dtype(), k) &&
      aligned16({w.data()}) && !batch_invariant()) {
    quant::launch_fused_float_gemv(device_, w.dtype(), true, {w.data(), w.dim(0), k, xp, res, nw, eps, sum, dst, nullptr});
    return;
  }
  if (half_acts(device_, m, w)) {
    Tensor hh = Tensor::empty({m, k}, w.dtype(), device_);
    quant::launch_norm_rows_half(device_, w.dtype(), xp, res, nw, eps, m, k, sum, static_cast<uint16_t*>(hh.data()),
                                 prefetch_of(w));
    bool added = false;
    if (gemm_half(device_, hh, w, dst, nullptr, &added)) return;
    // The library declined: the f32 rows below (the norm again: x and residual are unchanged, sum is rewritten).
  }
  Tensor h = Tensor::empty({m, k}, DType::F32, device_);
  quant::launch_norm_rows(device_, xp, res, nw, eps, m, k, sum, static_cast<float*>(h.data()), prefetch_of(w));
  run_float(device_, h, w, dst, nullptr);
}

void GpuKernels::swiglu_qmatmul(const Tensor& gate_up, const Tensor& w, const Tensor* residual, Tensor& out) {
  device_.activate();
  const int64_t m = gate_up.dim(0), inner = gate_up.dim(1) / 2;
  const float* res = residual ? static_cast<const float*>(residual->data()) : nullptr;
  float* dst = static_cast<float*>(out.data());
  bool added = false;
  if (inner % 8 != 0 || !aligned16({gate_up.data()})) {  // the composition, unfused
    Tensor gate = Tensor::empty({m, inner}, DType::F32, device_), up = Tensor::empty({m, inner}, DType::F32, device_);
    copy(gate_up.narrow(1, 0, inner), gate);
    copy(gate_up.narrow(1, inner, inner), up);
    Tensor act = Tensor::empty({m, inner}, DType::F32, device_);
    swiglu(gate, up, act);
    qmatmul(act, w, out);
  } else if (is_quantized(w.dtype())) {
    Tensor scratch;
    const quant::QActs acts =
        quant::quantize_swiglu_activations(device_, static_cast<const float*>(gate_up.data()), m, inner,
                                           dtype_block_size(w.dtype()) == 256, scratch, mmq_counters(m),
                                           prefetch_of(w));
    added = run_quantized(device_, acts, w, m, dst, res);
  } else if (m == 1 && quant::fused_float_gemv_enabled() && quant::fused_float_gemv_fits(w.dtype(), inner) &&
             aligned16({w.data()})) {  // one row: silu * up inside the gemv (elementwise: the same x')
    quant::launch_fused_float_gemv(device_, w.dtype(), false,
                                   {w.data(), w.dim(0), inner, static_cast<const float*>(gate_up.data()), nullptr,
                                    nullptr, 0.f, nullptr, dst, res});
    added = true;
  } else {
    bool done = false;
    if (half_acts(device_, m, w)) {
      Tensor acth = Tensor::empty({m, inner}, w.dtype(), device_);
      quant::launch_swiglu_rows_half(device_, w.dtype(), static_cast<const float*>(gate_up.data()), m, inner,
                                     static_cast<uint16_t*>(acth.data()), prefetch_of(w));
      done = gemm_half(device_, acth, w, dst, res, &added);  // else the residual, if any, is added below
    }
    if (!done) {
      Tensor act = Tensor::empty({m, inner}, DType::F32, device_);
      quant::launch_swiglu_rows(device_, static_cast<const float*>(gate_up.data()), m, inner,
                                static_cast<float*>(act.data()), prefetch_of(w));
      added = run_float(device_, act, w, dst, res);
    }
  }
  if (residual && !added) binary(BinaryOp::Add, out, *residual, out);
}

}  // namespace rbee::gpu
