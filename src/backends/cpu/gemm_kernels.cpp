// The GEMM drivers, compiled once per SIMD target (Highway foreach_target) and picked at run time.
//
// Packed path (BLIS loop nest), for each block of NC columns and each block of KC steps:
//   1. pack B[KC, NC] into NR-wide panels (shared by all threads; lives in L3),
//   2. every task takes a range of C rows x C columns: packs its rows of A[:, KC] in blocks of MC rows (L2)
//      and runs the micro-kernel over NR x MR tiles, B micro-panel (L1) outside, A micro-panel inside.
// A 16-bit C is accumulated in the task's f32 workspace and rounded once when the task ends.
// Small path (M or N <= 8): see gemm_small-inl.h.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/gemm_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backends/cpu/gemm_convert-inl.h"
#include "backends/cpu/gemm_micro-inl.h"
#include "backends/cpu/gemm_pack-inl.h"
#include "backends/cpu/gemm_small-inl.h"

#include <algorithm>
#include <cstdint>

#include "backends/cpu/gemm_internal.h"
#include "rbee/core/error.h"
#include "rbee/core/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::gemm_detail::HWY_NAMESPACE {

// Cache blocking (measured on Zen 3 against OpenBLAS, 1024^3 f32, one thread; 256/144 ran about 8% slower).
// KC: steps per packed block; a B micro-panel is KC x NR (32 KiB on AVX2) and is read from L1/L2 by the
// micro-kernel, while the C tile is loaded and stored once per KC steps. MC: rows of a task's packed A block
// (MC x KC, 576 KiB), streamed from L2/L3 with hardware prefetch. The packed B block (K x at most NC columns,
// at most kPackedBFloats) sits in L3 and every task walks all of it.
inline constexpr size_t kKC = 512;
inline constexpr size_t kMC = 288;
static_assert(kMC % kMR == 0);
inline constexpr size_t kNC = 4096;
inline constexpr size_t kPackedBFloats = size_t{2} << 20;  // 8 MiB

inline size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }
inline size_t RoundUp(size_t a, size_t b) { return CeilDiv(a, b) * b; }

// Calls fn(begin, end) over [0, n) split into about `chunks` ranges, on the pool when threads > 1.
template <class Fn>
void ForRanges(int threads, size_t n, size_t chunks, const Fn& fn) {
  chunks = std::max<size_t>(1, std::min(chunks, n));
  if (threads <= 1 || chunks == 1) {
    fn(size_t{0}, n);
    return;
  }
  ThreadPool::global().run((int64_t)chunks, [&](int64_t c) {
    const size_t begin = n * (size_t)c / chunks, end = n * (size_t)(c + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

// Calls fn with a value of C's element type (float, hwy::float16_t or hwy::bfloat16_t).
template <class Fn>
void ForEachCType(DType t, const Fn& fn) {
  switch (t) {
    case DType::F16: return fn(hwy::float16_t{});
    case DType::BF16: return fn(hwy::bfloat16_t{});
    default: return fn(float{});
  }
}

// ------------------------------------------------------------------------------------------ packed path

// Packs A rows [r0, r1) x steps [p0, p0 + kc) into MR-row panels at apack (panel i at apack + i * MR * kc).
template <class TA>
HWY_INLINE void PackA(const GemmArgs& g, const TA* A, size_t r0, size_t r1, size_t p0, size_t kc, float* apack) {
  for (size_t i = r0; i < r1; i += kMR) {
    PackPanel<kMR>(A + (int64_t)i * g.a.row_stride + (int64_t)p0 * g.a.col_stride, g.a.row_stride, g.a.col_stride,
                   std::min(kMR, r1 - i), kc, apack + (i - r0) * kc);
  }
}

// C[r0:r1, c0:c1] (+)= packed A rows x packed B columns over kc steps. B micro-panels (L1) outside, A
// micro-panels (L2) inside; c points at C[r0, c0].
HWY_INLINE void MacroKernel(size_t rows, size_t cols, size_t kc, const float* apack, const float* bpack, float* c,
                            int64_t ldc, bool accumulate) {
  for (size_t jr = 0; jr < cols; jr += kNR) {
    const size_t nr = std::min(kNR, cols - jr);
    const float* bp = bpack + jr * kc;
    for (size_t ir = 0; ir < rows; ir += kMR) {
      const size_t mr = std::min(kMR, rows - ir);
      float* ct = c + (int64_t)ir * ldc + (int64_t)jr;
      if (mr == kMR && nr == kNR) {
        MicroKernel(kc, apack + ir * kc, bp, ct, ldc, accumulate);
      } else {
        MicroKernelEdge(kc, apack + ir * kc, bp, ct, ldc, accumulate, mr, nr);
      }
    }
  }
}

template <class TA, class TB>
HWY_NOINLINE void GemmPacked(const GemmArgs& g) {
  const size_t M = (size_t)g.m, N = (size_t)g.n, K = (size_t)g.k;
  const TA* A = static_cast<const TA*>(g.a.data);
  const TB* B = static_cast<const TB*>(g.b.data);
  const int threads = g.threads;
  const size_t T = (size_t)threads;

  // K in equal blocks of at most kKC steps. N in equal blocks (multiples of NR) whose packed B, all of K deep,
  // stays within kPackedBFloats: B is packed once per block, then every task walks all K blocks on its own.
  const size_t n_pc = CeilDiv(K, kKC), kc_max = CeilDiv(K, n_pc);
  const size_t nc_limit = std::max(kNR, std::min(kNC, kPackedBFloats / K / kNR * kNR));
  const size_t n_jc = CeilDiv(N, nc_limit), nc_max = RoundUp(CeilDiv(N, n_jc), kNR);

  // Tasks: tm ranges of rows (whole MR tiles, at most about MC rows: the A block a task packs) x tn ranges of
  // columns (whole NR panels). With threads, at least two tasks per thread, so that a thread slowed down by
  // other work on the machine hands its share to the others.
  const size_t m_tiles = CeilDiv(M, kMR);
  size_t tm = std::min(m_tiles, CeilDiv(M, kMC)), tn = 1;
  if (T > 1) {
    tm = std::min(m_tiles, RoundUp(tm, T));
    if (tm < 2 * T) tn = std::min(CeilDiv(nc_max, kNR), CeilDiv(2 * T, tm));
  }
  const size_t task_rows_max = CeilDiv(m_tiles, tm) * kMR;

  // Packed B: K block q at bpack + q * kc_max * nc_max, NR panel t of it at + t * NR * kc.
  float* bpack = scratch(Scratch::PackB, n_pc * kc_max * nc_max);
  const bool c_f32 = g.c_dtype == DType::F32;

  for (size_t j0 = 0; j0 < N; j0 += nc_max) {
    const size_t nc = std::min(nc_max, N - j0);
    const size_t n_tiles = CeilDiv(nc, kNR);

    // 1. B[:, j0 : j0 + nc] -> panels, split over the threads by (K block, panel).
    ForRanges(threads, n_pc * n_tiles, 2 * T, [&](size_t u0, size_t u1) {
      for (size_t u = u0; u < u1;) {
        // the run of panels [t0, t1) of K block q
        const size_t q = u / n_tiles, t0 = u % n_tiles, t1 = std::min(n_tiles, t0 + (u1 - u));
        const size_t p0 = q * kc_max, kc = std::min(kc_max, K - p0), col = t0 * kNR;
        PackPanels<kNR>(B + (int64_t)p0 * g.b.row_stride + (int64_t)(j0 + col) * g.b.col_stride, g.b.col_stride,
                        g.b.row_stride, std::min(nc, t1 * kNR) - col, kc, bpack + q * kc_max * nc_max + col * kc);
        u += t1 - t0;
      }
    });

    // 2. Each task: C[rows, cols] (+)= A[rows, :] * packed B[:, cols], K block by K block. A 16-bit C is summed
    //    in the task's own f32 workspace and rounded once at the end.
    ForRanges(threads, tm * tn, tm * tn, [&](size_t task_begin, size_t task_end) {
      float* apack = scratch(Scratch::PackA, task_rows_max * kc_max);
      float* ws = c_f32 ? nullptr : scratch(Scratch::Workspace, task_rows_max * nc_max);
      for (size_t t = task_begin; t < task_end; ++t) {
        const size_t ti = t / tn, tj = t % tn;
        const size_t r0 = ti * m_tiles / tm * kMR, r1 = std::min(M, (ti + 1) * m_tiles / tm * kMR);
        const size_t c0 = tj * n_tiles / tn * kNR, c1 = std::min(nc, (tj + 1) * n_tiles / tn * kNR);
        if (r0 >= r1 || c0 >= c1) continue;
        const int64_t c_offset = (int64_t)r0 * g.c_rs + (int64_t)(j0 + c0);  // of C[r0, j0 + c0]
        float* c = c_f32 ? static_cast<float*>(g.c) + c_offset : ws;
        const int64_t ldc = c_f32 ? g.c_rs : (int64_t)nc_max;
        if (!c_f32 && g.accumulate) {
          ForEachCType(g.c_dtype, [&](auto tag) {
            const auto* src = static_cast<const decltype(tag)*>(g.c) + c_offset;
            for (size_t i = 0; i < r1 - r0; ++i) ConvertRowToF32(src + (int64_t)i * g.c_rs, c1 - c0, ws + i * nc_max);
          });
        }
        for (size_t q = 0; q < n_pc; ++q) {
          const size_t p0 = q * kc_max, kc = std::min(kc_max, K - p0);
          PackA(g, A, r0, r1, p0, kc, apack);
          MacroKernel(r1 - r0, c1 - c0, kc, apack, bpack + q * kc_max * nc_max + c0 * kc, c, ldc, q > 0 || g.accumulate);
        }
        if (!c_f32) {
          ForEachCType(g.c_dtype, [&](auto tag) {
            auto* dst = static_cast<decltype(tag)*>(g.c) + c_offset;
            for (size_t i = 0; i < r1 - r0; ++i) StoreRowFromF32(ws + i * nc_max, c1 - c0, dst + (int64_t)i * g.c_rs, false);
          });
        }
      }
    });
  }
}

// ------------------------------------------------------------------------------------------- small path

// Reads A (m x k, any strides and dtype) as contiguous f32 rows; returns the rows and sets lda.
template <class TA>
const float* SmallRowsF32(const GemmArgs& g, int64_t* lda) {
  const TA* A = static_cast<const TA*>(g.a.data);
  if constexpr (kIsF32<TA>) {
    if (g.a.col_stride == 1) {
      *lda = g.a.row_stride;
      return A;
    }
  }
  const size_t k = (size_t)g.k, ld = RoundUp(k, 16);
  float* rows = scratch(Scratch::SmallA, (size_t)g.m * ld);
  for (size_t i = 0; i < (size_t)g.m; ++i) {
    const TA* src = A + (int64_t)i * g.a.row_stride;
    if (g.a.col_stride == 1) {
      ConvertRowToF32(src, k, rows + i * ld);
    } else {
      for (size_t p = 0; p < k; ++p) rows[i * ld + p] = ToF32(src[(int64_t)p * g.a.col_stride]);
    }
  }
  *lda = (int64_t)ld;
  return rows;
}

template <class TB, class TC>
HWY_NOINLINE void GemmSmall(const GemmArgs& g, const float* a, int64_t lda, bool dot) {
  const SmallProblem<TB, TC> q{(size_t)g.m,          (size_t)g.n,  (size_t)g.k,  a,      lda,
                               static_cast<const TB*>(g.b.data), g.b.row_stride, g.b.col_stride,
                               static_cast<TC*>(g.c), g.c_rs,       g.c_cs,       g.accumulate};
  // Column ranges of at least 64 columns, several per thread.
  const size_t chunks = g.threads > 1 ? std::min<size_t>(4 * (size_t)g.threads, CeilDiv(q.n, 64)) : 1;
  if (dot) {
    ForRanges(g.threads, q.n, chunks, [&](size_t j0, size_t j1) { DotColumns(q, j0, j1); });
    return;
  }
  const bool direct = kIsF32<TC> && q.c_cs == 1 && !q.accumulate;
  ForRanges(g.threads, q.n, chunks, [&](size_t j0, size_t j1) {
    if (direct) {
      AxpyColumns(q, j0, j1, reinterpret_cast<float*>(q.c) + j0, (size_t)q.c_rs);
      return;
    }
    const size_t ldp = j1 - j0;
    float* part = scratch(Scratch::Workspace, q.m * ldp);
    AxpyColumns(q, j0, j1, part, ldp);
    for (size_t i = 0; i < q.m; ++i) {
      TC* c = q.c + (int64_t)i * q.c_rs + (int64_t)j0 * q.c_cs;
      if (q.c_cs == 1) {
        StoreRowFromF32(part + i * ldp, ldp, c, q.accumulate);
      } else {
        for (size_t j = 0; j < ldp; ++j) StoreOne(c + (int64_t)j * q.c_cs, part[i * ldp + j], q.accumulate);
      }
    }
  });
}

// C^T = B^T A^T: the same product with the operands' roles swapped and C read through its transpose.
GemmArgs Transposed(const GemmArgs& g) {
  GemmArgs t = g;
  t.m = g.n;
  t.n = g.m;
  t.a = {g.b.data, g.b.dtype, g.b.col_stride, g.b.row_stride};
  t.b = {g.a.data, g.a.dtype, g.a.col_stride, g.a.row_stride};
  t.c_rs = g.c_cs;
  t.c_cs = g.c_rs;
  return t;
}

template <class Fn>
void ForEachInputType(DType t, const Fn& fn) {
  switch (t) {
    case DType::F16: return fn(hwy::float16_t{});
    case DType::BF16: return fn(hwy::bfloat16_t{});
    default: return fn(float{});
  }
}

// The small path for g (m <= kSmallM, B read in place).
void RunSmall(const GemmArgs& g, bool dot) {
  int64_t lda = 0;
  const float* a = nullptr;
  ForEachInputType(g.a.dtype, [&](auto ta) { a = SmallRowsF32<decltype(ta)>(g, &lda); });
  ForEachInputType(g.b.dtype, [&](auto tb) {
    ForEachCType(g.c_dtype, [&](auto tc) { GemmSmall<decltype(tb), decltype(tc)>(g, a, lda, dot); });
  });
}

void Gemm(const GemmArgs& g) {
  // Decode shapes: one operand has at most kSmallM rows (of C or of C^T) and the other can be streamed.
  if (g.m <= kSmallM && g.b.row_stride == 1) return RunSmall(g, true);
  if (g.n <= kSmallM && g.a.col_stride == 1) return RunSmall(Transposed(g), true);
  if (g.m <= kSmallM && g.b.col_stride == 1 && g.n >= (int64_t)kLanes) return RunSmall(g, false);
  if (g.n <= kSmallM && g.a.row_stride == 1 && g.m >= (int64_t)kLanes) return RunSmall(Transposed(g), false);
  RBEE_ASSERT(g.c_cs == 1, "gemm: packed path needs adjacent C columns, got column stride {}", g.c_cs);
  ForEachInputType(g.a.dtype, [&](auto ta) {
    ForEachInputType(g.b.dtype, [&](auto tb) { GemmPacked<decltype(ta), decltype(tb)>(g); });
  });
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
namespace gemm_detail {
HWY_EXPORT(Gemm);
HWY_EXPORT(TargetName);
void dispatch(const GemmArgs& args) { HWY_DYNAMIC_DISPATCH(Gemm)(args); }
const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
std::vector<int64_t> runnable_targets() { return hwy::SupportedAndGeneratedTargets(); }
void force_target_for_testing(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
}  // namespace gemm_detail

const char* gemm_target_name() { return gemm_detail::target_name(); }
}  // namespace rbee::cpu
#endif
