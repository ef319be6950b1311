// Host-side launchers shared by the quantization kernel files (kernels/quant_*.cu). GpuKernels::qmatmul
// (quant_qmatmul.cu) composes them: quantize the activations once, then either the matvec kernels (a few rows)
// or the int8 tensor-core kernel MMQ (kMmqMinRows rows and more, batched decode to prompts).
#pragma once

#include <cstdint>

#include "backends/gpu/platform.h"
#include "rbee/core/dtype.h"

namespace rbee {
class Tensor;
}

namespace rbee::gpu {

class GpuDevice;

namespace quant {

// Activations quantized to 8 bits the way qmatmul pairs them with a weight type (the CPU's activation_dtype):
// blocks of 32 with an f16-rounded scale (Q8_0 / Q8_1 for legacy weights) or of 256 with an f32 scale (Q8_K
// for K-quant weights). Device arrays, row m of [M, K] at:
//   q + m * k      int8 levels
//   d + m * k / 32 the scale of each 32 elements (a Q8_K scale is repeated for its 8 groups)
//   s + m * k / 16 the sum of the levels of each 16 elements (what the min terms of weights multiply)
struct QActs {
  const int8_t* q;
  const float* d;
  const int32_t* s;
  int64_t k;
  int32_t* zeroed = nullptr;  // `zeroed` ints of the scratch set to 0 by the same kernel (MMQ's split-K counters)
};

// Bytes the launch after an activation pass reads (its weights): the pass asks for them in L2 (a hint).
struct Prefetch {
  const void* p = nullptr;
  int64_t bytes = 0;
};

// Quantizes x [m, k] (f32, contiguous, 16-byte aligned; k a multiple of 32, of 256 when q8k) into `scratch`
// (allocated here from the device's caching allocator; keep it alive while the result is used). With zeroed > 0
// the scratch also holds that many int32 the kernel sets to 0 (QActs::zeroed), so that a kernel launched next
// finds them zero without a memset of its own. pf: the next launch's weights, asked for in L2 (a hint).
QActs quantize_activations(GpuDevice& device, const float* x, int64_t m, int64_t k, bool q8k, Tensor& scratch,
                           int64_t zeroed = 0, Prefetch pf = {});
// The same for h = rms_norm(s) * weight, s = x or x + residual (then written to sum_out [m, k]); the CPU's
// rms_norm numerics. Every pointer 16-byte aligned; residual and sum_out null together or not.
QActs quantize_norm_activations(GpuDevice& device, const float* x, const float* residual, const float* weight,
                                float eps, int64_t m, int64_t k, bool q8k, float* sum_out, Tensor& scratch,
                                int64_t zeroed = 0, Prefetch pf = {});
// The same for silu(gate) * up of gate_up [m, 2 * inner] (gate features first): swiglu's numerics.
QActs quantize_swiglu_activations(GpuDevice& device, const float* gate_up, int64_t m, int64_t inner, bool q8k,
                                  Tensor& scratch, int64_t zeroed = 0, Prefetch pf = {});
// The two fused sources as f32 rows (float weights): out [m, k] = rms_norm(s) * weight (k a multiple of 8), and
// out [m, inner] = silu(gate) * up (inner a multiple of 8). 16-byte aligned pointers.
void launch_norm_rows(GpuDevice& device, const float* x, const float* residual, const float* weight, float eps,
                      int64_t m, int64_t k, float* sum_out, float* out, Prefetch pf = {});
void launch_swiglu_rows(GpuDevice& device, const float* gate_up, int64_t m, int64_t inner, float* out,
                        Prefetch pf = {});

// Largest number of activation rows one float gemv launch handles.
inline constexpr int kMatvecMaxRows = 8;
// Largest number of activation rows one quantized matvec launch handles (batched decode: 16 sequences stream
// the packed weights once).
inline constexpr int kQuantMatvecMaxRows = 16;

// out[r * ldo + j] = sum_k w[j, k] * x^[r, k] (+ residual[r * ldo + j]) for j < n, r < m
// (m <= kQuantMatvecMaxRows), where x^ are the quantized activations and w [n, k] the packed weight rows
// (row_bytes apart). prefetch: each warp first asks for its rows in L2 (l2_prefetch_enabled()).
struct QmvArgs {
  const uint8_t* w;
  int64_t n, k, row_bytes;
  QActs x;
  int m;
  float* out;
  int64_t ldo;
  const float* residual = nullptr;
  bool prefetch = true;
};
void launch_quant_matvec(GpuDevice& device, DType type, const QmvArgs& args);
// Per type (explicitly instantiated in quant_matvec_legacy.cu and quant_matvec_kquant.cu).
template <DType T>
void launch_quant_matvec_typed(GpuDevice& device, const QmvArgs& args);

// Decode tuning knobs, read once from the environment (for measurements; docs/perf-notes/gpu-llm.md):
//   RBEE_L2_PREFETCH=1   L2 prefetch hints (matvecs, activation passes); off by default: on the H100 they cut
//                        7B Q4_0 tg128 from 352 to 208 t/s (docs/perf-notes/gpu-llm.md)
//   RBEE_MATVEC_R=1      single-row matvec: one weight row per warp with 4 items per lane in flight
//                        (default: 2 rows per warp, 2 items each)
//   RBEE_MATVEC_PAIRS=1  Q4_K / Q5_K matvecs (M <= 4): a lane decodes items 2p and 2p + 1 of a block together
//                        (one header load and scale unpack for both; 32-byte qs pieces per lane); not yet measured
//   RBEE_PDL=0           decode-step kernels (activation passes, matvecs and gemvs, rope + cache write, the vector
//                        decode attention) as ordinary launches; by default they are programmatic dependent launches:
//                        each may start while the kernel before it finishes and load its weights (sm_90; HIP and the
//                        emulator launch in order). On by default since the H100 measurements of
//                        docs/perf-notes/gpu-llm.md ("decode2, session 5")
bool l2_prefetch_enabled();
int matvec_rows_m1();
bool matvec_pairs();
bool pdl_enabled();

#if defined(__CUDACC__) || defined(__HIPCC__)
// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when pdl_enabled(). Only for
// kernels that call grid_dependency_wait() before reading what earlier launches wrote, and write nothing before
// it.
template <class... Params, class... Args>
void launch_decode_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream,
                          Args... args) {
  if (pdl_enabled()) {
    RBEE_GPU_CHECK(launch_pdl(kernel, grid, block, smem, stream, args...));
  } else {
    kernel<<<grid, block, smem, stream>>>(args...);
  }
  RBEE_GPU_CHECK_LAUNCH();
}
#endif

// The same for F32 / F16 / BF16 weights and f32 activations x [m, k] (row stride k): out = w . x for F32
// weights, w . round16(x) for 16-bit weights (x rounded to the weight's type in registers), f32 sums.
struct GemvArgs {
  const void* w;
  int64_t n, k;
  const float* x;
  int m;
  float* out;
  int64_t ldo;
  const float* residual = nullptr;  // added to out like QmvArgs::residual
  bool prefetch = true;
};
void launch_float_gemv(GpuDevice& device, DType type, const GemvArgs& args);
// out[i] = x[i] rounded to `half_type` (F16 or BF16, nearest even) for i < count: the operand of the 16-bit
// GEMM of qmatmul's BLAS path. x and out 16-byte aligned.
void launch_round_to_half(GpuDevice& device, DType half_type, const float* x, int64_t count, uint16_t* out);

// ---- MMQ: block-type weights times quantized activations on int8 tensor cores (quant_mmq.cuh) ----

// Block types take MMQ from this many activation rows on (fewer: the matvec kernels). The matvec's 16-row
// launch does 16 x 8 dot4 per weight item and row pair, dot4-bound at about a third of the weight-read time
// that MMQ reaches (docs/perf-notes/gpu-llm.md has the measured crossover).
inline constexpr int64_t kMmqMinRows = 16;

// Zeroed int32 counters MMQ needs for split-K (one per output tile of a split launch; launches whose tiles are more
// do not split). qmatmul has quantize_activations zero them.
inline constexpr int64_t kMmqCounters = 2048;

// out[r * ldo + j] = sum_k w[j, k] * x^[r, k] for j < n, r < m (any m >= 1): the matvec's semantics.
// counters: kMmqCounters zeroed ints (split-K; nullptr: MMQ does not split).
struct MmqArgs {
  const uint8_t* w;
  int64_t n, k, row_bytes;
  QActs x;
  int64_t m;
  float* out;
  int64_t ldo;
  int* counters;
};
void launch_mmq(GpuDevice& device, DType type, const MmqArgs& args);
// Per type (explicitly instantiated in quant_mmq_<type>.cu, one translation unit per type).
template <DType T>
void launch_mmq_typed(GpuDevice& device, const MmqArgs& args);

}  // namespace quant
}  // namespace rbee::gpu
