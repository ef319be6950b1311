// Decode matvec kernels for x86 CPUs with AVX-512 VL + VNNI (matvec.h): 8 weight rows per call on the GGUF
// layout, lane r of a YMM register = weight row r. Functions carry their own target attribute and run only after
// a runtime CPU check (qgemm_dispatch.cpp's matvec_kernel), so the rest of the build keeps its baseline flags.
// Types: Q4_0, Q5_0, Q8_0, Q8_1, Q4_K, Q5_K, Q6_K (the others keep the row kernels at M = 1).
//
// Q4_0 / Q5_0 (one int32 per block, quant.h): per block, rows r and r + 4 share a YMM (r's 16 packed bytes in the
// low half, r + 4's in the high half); the low nibbles (elements 0-15 of both rows) and the high nibbles (16-31)
// each take one vpdpbusd against the activation's elements 0-15 / 16-31 broadcast to both halves, which leaves 4
// int32 lanes of each row's block sum per half. Three vphaddd reduce the four such registers to one with lane r =
// row r's exact int32 block sum of the unsigned levels q + 8; 8 * sum q_x (the activation row's side data) takes
// the offset out (Q5_0: the fifth bits added as 16 under a byte mask first, 16 * sum q_x out), then one vcvtdq2ps,
// the 8 rows' d_w times d_x, and one fma for 8 outputs: acc_r = fma(d_w * d_x, float(s_b), acc_r), block after
// block, the row kernels' order and rounding (t = d_w * d_x rounded to f32, then one fused multiply-add).
// Q8_0 / Q8_1 weights: per row a block is one YMM of levels q + 128 (xor 0x80), one vpdpbusd with the activation
// block, 8 int32 lanes; six vphaddd, two lane permutes and an add give lane r = row r, then 128 * sum q_x comes
// out and the f32 step is Q4_0's.
// K-quants: see MatVecK4 / MatVecQ6_K below. Every kernel prefetches the next group of 8 rows (NextGroup).
#include "backends/cpu/quant/matvec.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "backends/cpu/quant/blocks.h"
#include "backends/cpu/quant/qgemm_target.h"

#if RBEE_QGEMM_X86
#include <immintrin.h>

#define RBEE_MV __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace rbee::cpu::quant {
namespace {

// The activation row (quant.h) for Q8_0-paired weights: blocks, then d_x [nb] f32 and sum q_x [nb] int32.
struct XRow8 {
  const BlockQ8_0* x;
  const float* d;
  const int32_t* sum;
  XRow8(const void* xv, int64_t nb) {
    const char* row = static_cast<const char*>(xv);
    const size_t side = (size_t)((nb * (int64_t)sizeof(BlockQ8_0) + 31) / 32 * 32);
    x = reinterpret_cast<const BlockQ8_0*>(row);
    d = reinterpret_cast<const float*>(row + side);
    sum = reinterpret_cast<const int32_t*>(d + nb);
  }
};

// Row pointers of a group of `rows` weight rows; rows past the group repeat its last row (their
// lanes compute that row again and are not stored).
struct RowGroup {
  const char* w[kMatVecRows];
  RowGroup(const void* wv, int64_t w_row_bytes, int rows) {
    for (int r = 0; r < kMatVecRows; ++r) w[r] = static_cast<const char*>(wv) + std::min(r, rows - 1) * w_row_bytes;
  }
};

// Software prefetch of the next group of rows (the 8 * w_row_bytes bytes after this group; the driver walks groups
// in order, and prefetches past a mapping never fault): block step b fetches the b-th 8 * block_bytes of it into
// L2, so the next group is there when it starts. The rows of a group are read as 8 interleaved streams of only
// k / block_elems blocks each (1.1-1.7 KB at k = 2048), too short for the hardware prefetcher to get ahead of.
struct NextGroup {
  const char* base;
  int64_t step;  // bytes per block step: 8 rows x one block
  NextGroup(const void* wv, int64_t w_row_bytes, int64_t block_bytes)
      : base(static_cast<const char*>(wv) + kMatVecRows * w_row_bytes), step(kMatVecRows * block_bytes) {}
  void Fetch(int64_t b) const {
    const char* p = base + b * step;
    for (int64_t o = 0; o < step; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
  }
};

// The 8 rows' f16 at byte offset `at` of each row (the blocks' d_w), as f32. Four f16 are combined in a 64-bit
// general register, two such words make the vector (a vpgatherdd of the 8 dwords made the kernel 2x slower on
// Cascade Lake: microcode that mitigates gather data sampling makes gathers slow).
RBEE_MV inline __m256 RowsF16(const char* const* w, int64_t at) {
  uint64_t q[2];
  for (int h = 0; h < 2; ++h) {
    uint16_t v[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&v[i], w[4 * h + i] + at, 2);
    q[h] = (uint64_t)v[0] | ((uint64_t)v[1] << 16) | ((uint64_t)v[2] << 32) | ((uint64_t)v[3] << 48);
  }
  return _mm256_cvtph_ps(_mm_set_epi64x((long long)q[1], (long long)q[0]));
}

// acc + u * s: one vpdpbusd (unsigned bytes u times signed bytes s, 4 products added to each int32 lane).
RBEE_MV inline __m256i Dp(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }

inline uint32_t Word32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 bytes at lo in the low half, 16 bytes at hi in the high half.
RBEE_MV inline __m256i Load16x2(const char* lo, const char* hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

RBEE_MV inline void StoreRows(__m256 acc, int rows, float* out) {
  _mm256_mask_storeu_ps(out, (__mmask8)((1u << rows) - 1u), acc);
}

// ---- Q4_0 / Q5_0: levels q + 8 in nibbles; Q5_0 adds bit j of qh as bit 4 of element j (levels q + 16) ---------
template <class Block>
RBEE_MV void MatVecNibbles(int64_t k, const void* wv, int64_t w_row_bytes, int rows, const void* xv, float* out) {
  constexpr bool kFifth = std::is_same_v<Block, BlockQ5_0>;
  constexpr int kShift = kFifth ? 4 : 3;  // the levels' offset, 2^kShift
  constexpr int64_t kQs = offsetof(Block, qs);
  const int64_t nb = k / kQK;
  const XRow8 x(xv, nb);
  const RowGroup g(wv, w_row_bytes, rows);
  const NextGroup next(wv, w_row_bytes, (int64_t)sizeof(Block));
  const __m256i m4 = _mm256_set1_epi8(0x0F), v16 = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    next.Fetch(b);
    const int64_t at = b * (int64_t)sizeof(Block);
    const __m256i ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.x[b].qs)));
    const __m256i yhi =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.x[b].qs + 16)));
    __m256i p[4];
    for (int i = 0; i < 4; ++i) {
      const __m256i v = Load16x2(g.w[i] + at + kQs, g.w[i + 4] + at + kQs);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kFifth) {  // byte j of lo: element j of row i (j < 16) / of row i + 4; hi: elements 16 + j
        const uint32_t a = Word32(reinterpret_cast<const uint8_t*>(g.w[i] + at + offsetof(Block, qh)));
        const uint32_t c = Word32(reinterpret_cast<const uint8_t*>(g.w[i + 4] + at + offsetof(Block, qh)));
        lo = _mm256_mask_add_epi8(lo, (__mmask32)((a & 0xFFFFu) | (c << 16)), lo, v16);
        hi = _mm256_mask_add_epi8(hi, (__mmask32)((a >> 16) | (c & 0xFFFF0000u)), hi, v16);
      }
      p[i] = Dp(Dp(_mm256_setzero_si256(), lo, ylo), hi, yhi);
    }
    __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    s = _mm256_sub_epi32(s, _mm256_set1_epi32(x.sum[b] << kShift));
    const __m256 t = _mm256_mul_ps(RowsF16(g.w, at), _mm256_set1_ps(x.d[b]));
    acc = _mm256_fmadd_ps(t, _mm256_cvtepi32_ps(s), acc);
  }
  StoreRows(acc, rows, out);
}

// ---- Q8_0 / Q8_1 weights: signed levels, fed as q + 128 ---------------------------------------------------------
template <class Block>
RBEE_MV void MatVecQ8(int64_t k, const void* wv, int64_t w_row_bytes, int rows, const void* xv, float* out) {
  const int64_t nb = k / kQK;
  const XRow8 x(xv, nb);
  const RowGroup g(wv, w_row_bytes, rows);
  const NextGroup next(wv, w_row_bytes, (int64_t)sizeof(Block));
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  constexpr int64_t kQs = offsetof(Block, qs);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    next.Fetch(b);
    const int64_t at = b * (int64_t)sizeof(Block);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.x[b].qs));
    __m256i p[8];
    for (int r = 0; r < 8; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.w[r] + at + kQs));
      p[r] = Dp(_mm256_setzero_si256(), _mm256_xor_si256(v, flip), y);
    }
    // a: rows 0-3's lanes 0-3 sums in the low half, lanes 4-7 sums in the high half; c: rows 4-7.
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
    s = _mm256_sub_epi32(s, _mm256_set1_epi32(x.sum[b] << 7));
    const __m256 t = _mm256_mul_ps(RowsF16(g.w, at), _mm256_set1_ps(x.d[b]));
    acc = _mm256_fmadd_ps(t, _mm256_cvtepi32_ps(s), acc);
  }
  StoreRows(acc, rows, out);
}


// ---- K-quants (Q8_K activations): per row and super-block one exact int32 S (levels times sub-block scales) and
// one int32 C (the min / offset correction with Q8_K's bsums), then acc = fma(d * d_x, float(S), acc) and
// acc = fma(-(dc * d_x), float(C), acc) for the 8 rows at once (quant.h; dot_kquants.cpp's row kernels).
// Per 32-element group of a row: vpmaddubsw of the unsigned levels (<= 63) with the activations (pair sums
// |.| <= 2 * 63 * 128, no saturation), then vpdpwssd with the group's int16 scales (vpshufb of the row's scale
// bytes / words). The rows' S (8 int32 lanes each) reduce to lane = row as Q8_0's block sums do.

// lane r = the int32 sum of the 8 lanes of v[r] (exact).
RBEE_MV inline __m256i Reduce8(const __m256i (&v)[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}
// lane r = the int32 sum of the 4 lanes of row r's half of p[r % 4] (row r in the low half, row r + 4 in the high).
RBEE_MV inline __m256i ReducePairs(const __m256i (&p)[4]) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

// vpshufb pattern whose int16 lanes 0-7 take byte / word `lo` of each 128-bit half, lanes 8-15 byte / word `hi`
// (word: bytes 2i, 2i + 1; byte: byte i zero-extended).
RBEE_MV inline __m256i PickWords(int lo, int hi) {
  return _mm256_setr_m128i(_mm_set1_epi16((short)(2 * lo | (2 * lo + 1) << 8)),
                           _mm_set1_epi16((short)(2 * hi | (2 * hi + 1) << 8)));
}
RBEE_MV inline __m256i PickBytes(int i) { return _mm256_set1_epi16((short)(0x8000 | i)); }

RBEE_MV inline __m256i Load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Q4_K / Q5_K, groups 2 p and 2 p + 1 of the 8 rows: sv[r] += their levels times the activations times their
// scales (byte 2 p, 2 p + 1 of scb[r]). A template on p, so every shift count and shuffle pattern is a constant.
template <class Block, int p>
RBEE_MV inline void K4Pair(const RowGroup& g, int64_t at, const BlockQ8_K& y, __m256i (&sv)[8],
                           const __m256i (&scb)[8]) {
  constexpr bool kFifth = std::is_same_v<Block, BlockQ5_K>;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ya = Load32(y.qs + 64 * p), yb = Load32(y.qs + 64 * p + 32);
  for (int r = 0; r < 8; ++r) {
    const auto& blk = *reinterpret_cast<const Block*>(g.w[r] + at);
    const __m256i v = Load32(blk.qs + 32 * p);
    __m256i qa = _mm256_and_si256(v, m4), qb = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if constexpr (kFifth) {  // bit 2 p (2 p + 1) of each qh byte to bit 4: qa |= shifted qh & 0x10
      const __m256i h = Load32(blk.qh);
      const __m256i bit = _mm256_set1_epi8(0x10);
      __m256i ha, hb;
      if constexpr (2 * p <= 4) ha = _mm256_slli_epi16(h, 4 - 2 * p);
      else ha = _mm256_srli_epi16(h, 2 * p - 4);
      if constexpr (2 * p + 1 <= 4) hb = _mm256_slli_epi16(h, 3 - 2 * p);
      else hb = _mm256_srli_epi16(h, 2 * p - 3);
      qa = _mm256_ternarylogic_epi32(qa, ha, bit, 0xF8);  // qa | (ha & bit)
      qb = _mm256_ternarylogic_epi32(qb, hb, bit, 0xF8);
    }
    const __m256i pa = _mm256_maddubs_epi16(qa, ya), pb = _mm256_maddubs_epi16(qb, yb);
    sv[r] = _mm256_dpwssd_epi32(sv[r], pa, _mm256_shuffle_epi8(scb[r], PickBytes(2 * p)));
    sv[r] = _mm256_dpwssd_epi32(sv[r], pb, _mm256_shuffle_epi8(scb[r], PickBytes(2 * p + 1)));
  }
}

// Q4_K / Q5_K: 8 groups of 32 with a 6-bit scale and min each (kquant_scales.h's k_scales_k4, as 32-bit word
// arithmetic); Q5_K's fifth bit of element 64 p + l (group 2 p) is bit 2 p of qh[l], of 64 p + 32 + l bit 2 p + 1.
template <class Block>
RBEE_MV void MatVecK4(int64_t k, const void* wv, int64_t w_row_bytes, int rows, const void* xv, float* out) {
  const int64_t nb = k / kQKK;
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  const RowGroup g(wv, w_row_bytes, rows);
  const NextGroup next(wv, w_row_bytes, (int64_t)sizeof(Block));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    next.Fetch(b);
    const int64_t at = b * (int64_t)sizeof(Block);
    const BlockQ8_K& y = x[b];
    // Q8_K's bsums of the 8 groups of 32 (|.| <= 4096), in both halves.
    const __m128i bs16 = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8)));
    const __m256i bs32 = _mm256_broadcastsi128_si256(bs16);
    __m256i sv[8], scb[8];
    uint64_t mins[8];
    for (int r = 0; r < 8; ++r) {
      const auto& blk = *reinterpret_cast<const Block*>(g.w[r] + at);
      const uint32_t a = Word32(blk.scales), m = Word32(blk.scales + 4), h = Word32(blk.scales + 8);
      const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
      const uint64_t sc = (uint64_t)(a & lo6) | ((uint64_t)((h & lo4) | (((a >> 6) & lo2) << 4)) << 32);
      mins[r] = (uint64_t)(m & lo6) | ((uint64_t)(((h >> 4) & lo4) | (((m >> 6) & lo2) << 4)) << 32);
      scb[r] = _mm256_set1_epi64x((long long)sc);  // byte j = scale of group j, in each half
      sv[r] = _mm256_setzero_si256();
    }
    // Rows innermost: each row's vpdpwssd chain has the other 7 rows' work between its steps.
    K4Pair<Block, 0>(g, at, y, sv, scb);
    K4Pair<Block, 1>(g, at, y, sv, scb);
    K4Pair<Block, 2>(g, at, y, sv, scb);
    K4Pair<Block, 3>(g, at, y, sv, scb);
    // C: row r's mins (zero-extended to int16) times the group bsums, rows r and r + 4 in one register.
    __m256i cp[4];
    for (int i = 0; i < 4; ++i) {
      const __m256i mn = _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mins[i + 4], (long long)mins[i]));
      cp[i] = _mm256_madd_epi16(mn, bs32);
    }
    const __m256 fs = _mm256_cvtepi32_ps(Reduce8(sv)), fc = _mm256_cvtepi32_ps(ReducePairs(cp));
    const __m256 dx = _mm256_set1_ps(y.d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(RowsF16(g.w, at), dx), fs, acc);
    acc = _mm256_fnmadd_ps(_mm256_mul_ps(RowsF16(g.w, at + 2), dx), fc, acc);
  }
  StoreRows(acc, rows, out);
}

// Q6_K levels: (low & 0x0F) | high in one vpternlogd (bitwise select, 0xCA: the 0x0F mask picks bits 0-3 of low,
// the rest comes from high, whose bits other than 4-5 are zero).
RBEE_MV inline __m256i Merge6(__m256i low, __m256i high) {
  return _mm256_ternarylogic_epi32(_mm256_set1_epi8(0x0F), low, high, 0xCA);
}

// Q6_K: levels q (0..63: low 4 bits in ql, high 2 in qh), 16 int8 scales per super-block (one per 16 elements),
// c = 32 * sc (C = 32 * sum sc[i] bsums[i], shifted after the reduction: |C| < 2^28), dc = d.
RBEE_MV void MatVecQ6_K(int64_t k, const void* wv, int64_t w_row_bytes, int rows, const void* xv, float* out) {
  const int64_t nb = k / kQKK;
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  const RowGroup g(wv, w_row_bytes, rows);
  const NextGroup next(wv, w_row_bytes, (int64_t)sizeof(BlockQ6_K));
  const __m256i m3 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    next.Fetch(b);
    const int64_t at = b * (int64_t)sizeof(BlockQ6_K);
    const BlockQ8_K& y = x[b];
    const __m256i bsums = Load32(y.bsums);
    __m256i sv[8], cv[8];
    for (int r = 0; r < 8; ++r) {
      const char* scales = g.w[r] + at + offsetof(BlockQ6_K, scales);
      cv[r] = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))), bsums);
      sv[r] = _mm256_setzero_si256();
    }
    for (int n = 0; n < 2; ++n) {  // halves of 128 elements; rows inside, so a row's chain interleaves with 7 others
      __m256i ys[4];
      for (int j = 0; j < 4; ++j) ys[j] = Load32(y.qs + 128 * n + 32 * j);
      for (int r = 0; r < 8; ++r) {
        const auto& blk = *reinterpret_cast<const BlockQ6_K*>(g.w[r] + at);
        // int16 scales 8 n .. 8 n + 7 in both halves.
        const __m256i half = _mm256_broadcastsi128_si256(
            _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * n))));
        const __m256i la = Load32(blk.ql + 64 * n), lb = Load32(blk.ql + 64 * n + 32), h = Load32(blk.qh + 32 * n);
        // Group j (32 elements 128 n + 32 j): low 4 bits from la (j = 0, 2: low / high nibble) or lb (j = 1, 3),
        // high 2 bits at bit 2 j of h, moved to bits 4-5.
        const __m256i q[4] = {Merge6(la, _mm256_and_si256(_mm256_slli_epi16(h, 4), m3)),
                              Merge6(lb, _mm256_and_si256(_mm256_slli_epi16(h, 2), m3)),
                              Merge6(_mm256_srli_epi16(la, 4), _mm256_and_si256(h, m3)),
                              Merge6(_mm256_srli_epi16(lb, 4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m3))};
        // Sub-blocks 8 n + 2 j (elements 0-15 of group j) and 8 n + 2 j + 1: words 2 j, 2 j + 1 of half. Two
        // chains (even / odd groups) keep vpdpwssd's latency off the critical path.
        __m256i e = _mm256_setzero_si256(), o = _mm256_setzero_si256();
        e = _mm256_dpwssd_epi32(e, _mm256_maddubs_epi16(q[0], ys[0]), _mm256_shuffle_epi8(half, PickWords(0, 1)));
        o = _mm256_dpwssd_epi32(o, _mm256_maddubs_epi16(q[1], ys[1]), _mm256_shuffle_epi8(half, PickWords(2, 3)));
        e = _mm256_dpwssd_epi32(e, _mm256_maddubs_epi16(q[2], ys[2]), _mm256_shuffle_epi8(half, PickWords(4, 5)));
        o = _mm256_dpwssd_epi32(o, _mm256_maddubs_epi16(q[3], ys[3]), _mm256_shuffle_epi8(half, PickWords(6, 7)));
        sv[r] = _mm256_add_epi32(sv[r], _mm256_add_epi32(e, o));
      }
    }
    const __m256 fs = _mm256_cvtepi32_ps(Reduce8(sv));
    const __m256 fc = _mm256_cvtepi32_ps(_mm256_slli_epi32(Reduce8(cv), 5));
    const __m256 t = _mm256_mul_ps(RowsF16(g.w, at + offsetof(BlockQ6_K, d)), _mm256_set1_ps(y.d));
    acc = _mm256_fmadd_ps(t, fs, acc);
    acc = _mm256_fnmadd_ps(t, fc, acc);
  }
  StoreRows(acc, rows, out);
}

}  // namespace

MatVecFn matvec_avx512_vnni(DType weight) {
  switch (weight) {
    case DType::Q4_0: return &MatVecNibbles<BlockQ4_0>;
    case DType::Q5_0: return &MatVecNibbles<BlockQ5_0>;
    case DType::Q8_0: return &MatVecQ8<BlockQ8_0>;
    case DType::Q8_1: return &MatVecQ8<BlockQ8_1>;
    case DType::Q4_K: return &MatVecK4<BlockQ4_K>;
    case DType::Q5_K: return &MatVecK4<BlockQ5_K>;
    case DType::Q6_K: return &MatVecQ6_K;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant
#endif  // RBEE_QGEMM_X86
