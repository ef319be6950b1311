// The GEMM drivers, compiled once per SIMD target (Highway foreach_target) and picked at run time.
//
// Packed path (BLIS loop nest), for each block of NC columns and each block of KC steps:
//   1. pack B[KC, NC] into NR-wide panels (shared by all threads; lives in L3),
//   2. every task takes a range of C rows x C columns: packs its rows of A[:, KC] in blocks of MC rows (L2)
//      and runs the micro-kernel over NR x MR tiles, B micro-panel (L1) outside, A micro-panel inside.
// A 16-bit C is accumulated in an f32 workspace and rounded once by the task that finishes its block.
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

// Cache blocking. KC: a B micro-panel (KC x NR f32, 16 KiB on AVX2) stays in L1 while the A block streams
// past it. MC: the A block (MC x KC, 144 KiB) stays in L2. NC: the packed B block (KC x NC) sits in L3.
inline constexpr size_t kKC = 256;
inline constexpr size_t kMC = 24 * kMR;
inline constexpr size_t kNC = 4096;

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

template <class TA, class TB>
HWY_NOINLINE void GemmPacked(const GemmArgs& g) {
  const size_t M = (size_t)g.m, N = (size_t)g.n, K = (size_t)g.k;
  const TA* A = static_cast<const TA*>(g.a.data);
  const TB* B = static_cast<const TB*>(g.b.data);
  const int threads = g.threads;

  // K and N in equal blocks (no thin last block): kc <= kKC, nc <= kNC and a multiple of kNR.
  const size_t n_pc = CeilDiv(K, kKC), kc_max = CeilDiv(K, n_pc);
  const size_t n_jc = CeilDiv(N, kNC), nc_max = RoundUp(CeilDiv(N, n_jc), kNR);

  // Tasks of one (jc, pc) step: tm ranges of rows (whole MR tiles) x tn ranges of columns (whole NR panels).
  // Enough tasks for every thread to take several, so a thread slowed by other work on the machine does not
  // hold the others up; row ranges of at most about MC rows keep each task's A block in L2.
  const size_t m_tiles = CeilDiv(M, kMR);
  size_t tm = 1, tn = 1;
  if (threads > 1) {
    const size_t want = 2 * (size_t)threads;
    tm = std::min(m_tiles, RoundUp(CeilDiv(M, kMC), (size_t)threads));
    if (tm < want) tn = std::min(CeilDiv(nc_max, kNR), CeilDiv(want, tm));
  }

  // A 16-bit C is summed in an f32 workspace of M x nc_max.
  const bool c_f32 = g.c_dtype == DType::F32;
  float* ws = nullptr;
  const size_t ldw = nc_max;
  if (!c_f32) ws = scratch(Scratch::Workspace, M * ldw);
  float* bpack = scratch(Scratch::PackB, kc_max * nc_max);

  for (size_t j0 = 0; j0 < N; j0 += nc_max) {
    const size_t nc = std::min(nc_max, N - j0);
    const size_t n_tiles = CeilDiv(nc, kNR);
    float* cblk = c_f32 ? static_cast<float*>(g.c) + j0 : ws;
    const int64_t ldc = c_f32 ? g.c_rs : (int64_t)ldw;

    for (size_t p0 = 0; p0 < K; p0 += kc_max) {
      const size_t kc = std::min(kc_max, K - p0);
      const bool first = p0 == 0, last = p0 + kc == K;

      // 1. B[p0 : p0 + kc, j0 : j0 + nc] -> NR-wide panels, panel t at bpack + t * NR * kc.
      ForRanges(threads, n_tiles, 2 * (size_t)threads, [&](size_t t0, size_t t1) {
        for (size_t t = t0; t < t1; ++t) {
          const size_t col = t * kNR;
          PackPanel<kNR>(B + (int64_t)p0 * g.b.row_stride + (int64_t)(j0 + col) * g.b.col_stride, g.b.col_stride,
                         g.b.row_stride, std::min(kNR, nc - col), kc, bpack + col * kc);
        }
      });

      // 2. C[rows, cols] (+)= A[rows, p0 : p0 + kc] * packed B, one task per rectangle.
      const bool kernel_accumulates = !first || g.accumulate;
      auto task = [&](size_t task_begin, size_t task_end) {
        float* apack = scratch(Scratch::PackA, kMC * kc_max);
        for (size_t t = task_begin; t < task_end; ++t) {
          const size_t ti = t / tn, tj = t % tn;
          const size_t r0 = ti * m_tiles / tm * kMR, r1 = std::min(M, (ti + 1) * m_tiles / tm * kMR);
          const size_t c0 = tj * n_tiles / tn * kNR, c1 = std::min(nc, (tj + 1) * n_tiles / tn * kNR);
          if (r0 >= r1 || c0 >= c1) continue;
          if (!c_f32 && first && g.accumulate) {
            ForEachCType(g.c_dtype, [&](auto tag) {
              using TC = decltype(tag);
              const TC* c = static_cast<const TC*>(g.c);
              for (size_t i = r0; i < r1; ++i) ConvertRowToF32(c + (int64_t)i * g.c_rs + (j0 + c0), c1 - c0, ws + i * ldw + c0);
            });
          }
          for (size_t i0 = r0; i0 < r1; i0 += kMC) {
            const size_t mc = std::min(kMC, r1 - i0);
            for (size_t ir = 0; ir < mc; ir += kMR) {
              PackPanel<kMR>(A + (int64_t)(i0 + ir) * g.a.row_stride + (int64_t)p0 * g.a.col_stride, g.a.row_stride,
                             g.a.col_stride, std::min(kMR, mc - ir), kc, apack + ir * kc);
            }
            for (size_t jr = c0; jr < c1; jr += kNR) {
              const size_t nr = std::min(kNR, c1 - jr);
              const float* bp = bpack + jr * kc;
              for (size_t ir = 0; ir < mc; ir += kMR) {
                const size_t mr = std::min(kMR, mc - ir);
                float* c = cblk + (int64_t)(i0 + ir) * ldc + (int64_t)jr;
                if (mr == kMR && nr == kNR) {
                  MicroKernel(kc, apack + ir * kc, bp, c, ldc, kernel_accumulates);
                } else {
                  MicroKernelEdge(kc, apack + ir * kc, bp, c, ldc, kernel_accumulates, mr, nr);
                }
              }
            }
          }
          if (!c_f32 && last) {
            ForEachCType(g.c_dtype, [&](auto tag) {
              using TC = decltype(tag);
              TC* c = static_cast<TC*>(g.c);
              for (size_t i = r0; i < r1; ++i) StoreRowFromF32(ws + i * ldw + c0, c1 - c0, c + (int64_t)i * g.c_rs + (j0 + c0), false);
            });
          }
        }
      };
      ForRanges(threads, tm * tn, tm * tn, task);
    }
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
}  // namespace gemm_detail

const char* gemm_target_name() { return gemm_detail::target_name(); }
}  // namespace rbee::cpu
#endif
