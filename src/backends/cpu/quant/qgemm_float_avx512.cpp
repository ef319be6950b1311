// Prompt GEMM (qgemm.h) for F16 and BF16 weights on x86 CPUs with AVX-512: the products of the Highway row kernel
// (dot_float.cpp) on its AVX3 target, register-blocked over 2 activation rows x 6 weight rows.
//
// The row kernel's order on AVX3 (16 f32 lanes), which every output here reproduces bit for bit: the k elements
// in chunks of 16; chunk j goes into accumulator j % 2 of the row (lane l of chunk j: acc = fma(w, x, acc), chunks
// in order), then the row's result is _mm512_reduce_add_ps(acc0 + acc1) (Highway's SumOfLanes on AVX3). The row
// kernel adds a scalar tail when k is not a multiple of 16; qmatmul takes the GEMM only where block_elems (16)
// divides k (cpu_quant.cpp), so there is none. Products are exact in f32 (x already rounded to the weight's type, quant.h).
//
// Panel of 6 weight rows: the rows widened to f32, chunk by chunk: [k / 16 chunks][6 rows][16 f32] (64-byte
// aligned), so a tile reads 6 weight vectors per chunk from one pointer. Activation rows are read in place (f32,
// quant.h's rows for F16 / BF16 weights). A tile holds 2 rows x 6 weight rows x 2 accumulators = 24 ZMM; per chunk
// it loads 6 weight vectors (L1) and 2 activation vectors (L2) for 12 fmas (the row kernel: 5 loads for 4 fmas).
// One thread, BM_QMatmulPrompt/f16/128 (Zen 5, loaded machine): 2 x 4 tiles 125-134 GFLOP/cpu-s, 2 x 6 146.
#include <cstring>

#include "backends/cpu/quant/qgemm.h"
#include "backends/cpu/quant/qgemm_target.h"

#if RBEE_QGEMM_X86
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define RBEE_F512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

namespace rbee::cpu::quant {
namespace {

constexpr int kRows = 6;      // weight rows per panel
constexpr int kTileRows = 2;  // activation rows per tile
constexpr int64_t kChunk = 16;

// 16 weights of one row, widened to f32.
struct WF16 {
  RBEE_F512 static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct WBF16 {
  RBEE_F512 static __m512 Load(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
};

template <class W>
struct FloatGemm {
  static constexpr int64_t kChunkBytes = kRows * kChunk * 4;
  static int64_t PanelBytes(int64_t k) { return (k / kChunk) * kChunkBytes; }

  RBEE_F512 static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    auto* out = static_cast<float*>(panel);
    const int64_t chunks = k / kChunk;
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) {
        for (int64_t j = 0; j < chunks; ++j) _mm512_store_ps(out + (j * kRows + r) * kChunk, _mm512_setzero_ps());
        continue;
      }
      const auto* src = reinterpret_cast<const uint16_t*>(static_cast<const char*>(w) + r * w_row_bytes);
      for (int64_t j = 0; j < chunks; ++j) _mm512_store_ps(out + (j * kRows + r) * kChunk, W::Load(src + j * kChunk));
    }
  }

  // Chunk j of the MR activation rows into accumulator H (= j % 2) of every (row, weight row) pair.
  template <int MR, int H>
  RBEE_F512 __attribute__((always_inline)) static inline void Step(const float* p, const float* const* x, int64_t j,
                                                                   __m512 (&acc)[MR][kRows][2]) {
    const float* pj = p + j * kRows * kChunk;
    __m512 xr[MR];
    for (int r = 0; r < MR; ++r) xr[r] = _mm512_loadu_ps(x[r] + j * kChunk);
    for (int c = 0; c < kRows; ++c) {
      __m512 wc = _mm512_load_ps(pj + c * kChunk);
      // One load per weight vector, kept in a register: folded into each fma as a memory operand (the compiler's
      // choice), it was loaded once per activation row, and loads bounded the tile.
      __asm__("" : "+v"(wc));
      for (int r = 0; r < MR; ++r) acc[r][c][H] = _mm512_fmadd_ps(wc, xr[r], acc[r][c][H]);
    }
  }

  // Chunks [b0, b1) of activation rows x (MR of them, xs bytes apart) against the panel; state holds the
  // MR x 6 x 2 accumulators between calls ([MR][6][2][16] f32).
  template <int MR>
  RBEE_F512 static void Tile(int64_t k, const void* panel, const void* xv, size_t xs, float* out, int64_t os,
                             int ncols, int64_t b0, int64_t b1, float* state) {
    const int64_t chunks = k / kChunk;
    const auto* p = static_cast<const float*>(panel);
    const float* x[MR];
    for (int r = 0; r < MR; ++r) x[r] = reinterpret_cast<const float*>(static_cast<const char*>(xv) + r * xs);
    __m512 acc[MR][kRows][2];
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < kRows; ++c)
        for (int h = 0; h < 2; ++h)
          acc[r][c][h] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + ((r * kRows + c) * 2 + h) * 16);
    int64_t j = b0;
    if (j < b1 && (j & 1)) Step<MR, 1>(p, x, j++, acc);
    for (; j + 2 <= b1; j += 2) {
      Step<MR, 0>(p, x, j, acc);
      Step<MR, 1>(p, x, j + 1, acc);
    }
    if (j < b1) Step<MR, 0>(p, x, j, acc);
    if (b1 < chunks) {
      for (int r = 0; r < MR; ++r)
        for (int c = 0; c < kRows; ++c)
          for (int h = 0; h < 2; ++h) _mm512_store_ps(state + ((r * kRows + c) * 2 + h) * 16, acc[r][c][h]);
      return;
    }
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < ncols; ++c) out[r * os + c] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][c][0], acc[r][c][1]));
  }

  static void TileRows(int64_t k, const void* panel, const void* x, size_t xs, int mrows, float* out, int64_t os,
                       int ncols, int64_t b0, int64_t b1, float* state) {
    if (mrows == 1) return Tile<1>(k, panel, x, xs, out, os, ncols, b0, b1, state);
    Tile<2>(k, panel, x, xs, out, os, ncols, b0, b1, state);
  }

  static constexpr QGemm kGemm = {&PanelBytes, &Pack, &TileRows, nullptr, nullptr, kChunk, kChunkBytes, kRows,
                                  kTileRows,   64,    int64_t{16} << 10};
};
static_assert(kTileRows * kRows * 2 * 16 <= kQGemmStateFloats, "float GEMM state must fit kQGemmStateFloats");

}  // namespace

const QGemm* qgemm_float_avx512(DType weight) {
  switch (weight) {
    case DType::F16: return &FloatGemm<WF16>::kGemm;
    case DType::BF16: return &FloatGemm<WBF16>::kGemm;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant
#endif  // RBEE_QGEMM_X86
