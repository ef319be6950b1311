// CPU paged KV cache: kv_cache_write and paged_attention (flash-style online softmax over cache blocks). The per-key
// inner products and accumulations run through Highway with run-time dispatch, reading the cache in its own dtype
// (f16/bf16 promoted to f32 in registers). 16-bit caches follow the op contract's tensor-core semantics (PagedAttention
// in rbee/backend/op_table.def): q rounded to the cache's type, each probability rounded to it before it weights V (the
// running sum takes the f32 value).
// Attribution: the f32 path's order of operations follows ggml / llama.cpp (MIT License) and llamafile's tinyBLAS
// (Apache License 2.0); NOTICE holds the license texts.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_paged_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/common/attention_math.h"
#include "backends/common/batch_invariant.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"
#include "backends/cpu/exp_ggml-inl.h"
#include "rbee/core/env.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One cache element as f32 (for loop tails).
template <class K>
inline float ElementToF32(const K& x) {
  if constexpr (std::is_same_v<K, float>) {
    return x;
  } else {
    uint16_t bits;
    std::memcpy(&bits, &x, 2);
    if constexpr (std::is_same_v<K, hwy::bfloat16_t>) return rbee::bf16_bits_to_f32(bits);
    else return rbee::f16_bits_to_f32(bits);
  }
}

// dot(q[0..d), k[0..d)) with k in f32 / f16 / bf16 (raw 16-bit storage).
template <class K>
float DotQK(const float* HWY_RESTRICT q, const K* HWY_RESTRICT k, int64_t d) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * (int64_t)n <= d; i += 2 * n) {
    if constexpr (std::is_same_v<K, float>) {
      acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::LoadU(df, k + i), acc0);
      acc1 = hn::MulAdd(hn::LoadU(df, q + i + n), hn::LoadU(df, k + i + n), acc1);
    } else {
      const hn::Rebind<K, decltype(df)> dk;
      acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::PromoteTo(df, hn::LoadU(dk, k + i)), acc0);
      acc1 = hn::MulAdd(hn::LoadU(df, q + i + n), hn::PromoteTo(df, hn::LoadU(dk, k + i + n)), acc1);
    }
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < d; ++i) sum += q[i] * ElementToF32(k[i]);
  return sum;
}

// acc[0..d) = acc * scale + p * v (v in f32 / f16 / bf16).
template <class V>
void ScaleAddV(float* HWY_RESTRICT acc, float scale, float p, const V* HWY_RESTRICT v, int64_t d) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), vp = hn::Set(df, p);
  int64_t i = 0;
  for (; i + (int64_t)n <= d; i += n) {
    hn::Vec<decltype(df)> vv;
    if constexpr (std::is_same_v<V, float>) {
      vv = hn::LoadU(df, v + i);
    } else {
      const hn::Rebind<V, decltype(df)> dv;
      vv = hn::PromoteTo(df, hn::LoadU(dv, v + i));
    }
    hn::StoreU(hn::MulAdd(vp, vv, hn::Mul(vs, hn::LoadU(df, acc + i))), df, acc + i);
  }
  for (; i < d; ++i) acc[i] = acc[i] * scale + p * ElementToF32(v[i]);
}

// x rounded to the cache element type K (f16 / bf16); unchanged for f32.
template <class K>
inline float RoundToCache(float x) {
  if constexpr (std::is_same_v<K, hwy::bfloat16_t>) return rbee::bf16_bits_to_f32(rbee::f32_to_bf16_bits(x));
  else if constexpr (std::is_same_v<K, hwy::float16_t>) return rbee::f16_bits_to_f32(rbee::f32_to_f16_bits(x));
  else return x;
}

// The op's arguments as the kernels below read them (PagedAttention in rbee/backend/op_table.def):
//   q            F32 [T, Hq, D], any strides
//   k/v caches   C [n_blocks, block_size, Hkv, D], contiguous (C: float, hwy::float16_t or hwy::bfloat16_t)
//   seq_info     I32 [B, 3]: per sequence its first query row in q, its query count, its context length
//   block_tables I32 [B, max_blocks]: per sequence the cache block of each block_size positions
//   out          F32 [T, Hq, D], contiguous
template <class C>
struct PagedArgs {
  PagedArgs(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
            const rbee::Tensor& seq_info, const rbee::Tensor& block_tables, rbee::Tensor& out)
      : n_seq(seq_info.dim(0)), max_blocks(block_tables.dim(1)), block_size(k_cache.dim(1)), hkv(k_cache.dim(2)),
        d(k_cache.dim(3)), hq(q.dim(1)), group(hq / hkv), row_stride(hkv * d), q_s0(q.stride(0)),
        q_s1(q.stride(1)), q_s2(q.stride(2)), info(static_cast<const int32_t*>(seq_info.data())),
        tables(static_cast<const int32_t*>(block_tables.data())), qp(static_cast<const float*>(q.data())),
        kc(static_cast<const C*>(k_cache.data())), vc(static_cast<const C*>(v_cache.data())),
        op(static_cast<float*>(out.data())) {}

  const int64_t n_seq, max_blocks, block_size, hkv, d, hq;
  const int64_t group;       // query heads per KV head
  const int64_t row_stride;  // elements between consecutive positions inside a block
  const int64_t q_s0, q_s1, q_s2;
  const int32_t* info;
  const int32_t* tables;
  const float* qp;
  const C* kc;
  const C* vc;
  float* op;

  int64_t q_start(int64_t b) const { return info[b * 3]; }
  int64_t q_len(int64_t b) const { return info[b * 3 + 1]; }
  // The cache position of query row t (of sequence b): its causal keys are positions [0, position].
  int64_t position(int64_t b, int64_t t) const { return info[b * 3 + 2] - q_len(b) + (t - q_start(b)); }
  // Sequence b's block table [max_blocks], and the cache slot of its position j.
  const int32_t* table(int64_t b) const { return tables + b * max_blocks; }
  int64_t slot(const int32_t* table, int64_t j) const {
    return (int64_t)table[j / block_size] * block_size + j % block_size;
  }
  // KV head g's key / value row [D] at a slot; query head h's row of token t in q (D elements q_s2 apart); the
  // output row [D] of token t and head h.
  const C* k_row(int64_t slot, int64_t g) const { return kc + slot * row_stride + g * d; }
  const C* v_row(int64_t slot, int64_t g) const { return vc + slot * row_stride + g * d; }
  const float* q_row(int64_t t, int64_t h) const { return qp + t * q_s0 + h * q_s1; }
  float* out_row(int64_t t, int64_t h) const { return op + (t * hq + h) * d; }
  // Every query row in order, as (sequence, row index in q).
  std::vector<std::pair<int64_t, int64_t>> tokens() const {
    std::vector<std::pair<int64_t, int64_t>> list;
    for (int64_t b = 0; b < n_seq; ++b) {
      for (int64_t i = 0; i < q_len(b); ++i) list.emplace_back(b, q_start(b) + i);
    }
    return list;
  }
};

// The first key a query at cache position `pos` sees: 0, or the start of its sliding window.
inline int64_t FirstKey(int64_t pos, int window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

template <class C>
void PagedAttentionTyped(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                         const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                         const rbee::AttentionParams& params, rbee::Tensor& out) {
  const PagedArgs<C> a(q, k_cache, v_cache, seq_info, block_tables, out);
  const int64_t hq = a.hq, d = a.d;
  // Task list: (sequence, query token) pairs x query heads.
  const std::vector<std::pair<int64_t, int64_t>> tokens = a.tokens();
  rbee::ThreadPool::global().run((int64_t)tokens.size() * hq, [&](int64_t task) {
    const auto [b, t] = tokens[(size_t)(task / hq)];
    const int64_t h = task % hq, g = h / a.group;
    const int64_t pos = a.position(b, t);
    const int64_t first = FirstKey(pos, params.window);
    const float* qv = a.q_row(t, h);
    if constexpr (!std::is_same_v<C, float>) {
      float* qr = rbee::cpu::scratch<float>(0, (size_t)d);
      for (int64_t i = 0; i < d; ++i) qr[i] = RoundToCache<C>(qv[i]);
      qv = qr;
    }
    float* acc = a.out_row(t, h);
    for (int64_t i = 0; i < d; ++i) acc[i] = 0.0f;
    float running_max = -std::numeric_limits<float>::infinity(), running_sum = 0.0f;
    const int32_t* table = a.table(b);
    for (int64_t j = first; j <= pos; ++j) {
      const int64_t slot = a.slot(table, j);
      float s = DotQK(qv, a.k_row(slot, g), d) * params.scale;
      s = attention::soft_cap(s, params.softcap);
      const float new_max = std::max(running_max, s);
      const float correction = std::exp(running_max - new_max);  // 0 on the first key
      const float p = std::exp(s - new_max);
      running_sum = running_sum * correction + p;
      running_max = new_max;
      ScaleAddV(acc, correction, RoundToCache<C>(p), a.v_row(slot, g), d);
    }
    const float inv = running_sum > 0 ? 1.0f / running_sum : 0.0f;
    for (int64_t i = 0; i < d; ++i) acc[i] *= inv;
  });
}

// ---- the same numerics, blocked (prompts and decode of 16-bit caches, f32 caches with softcap) ----
// A task takes up to kTileTokens query tokens of one sequence and the `group` query heads that share one KV head,
// and walks the keys in blocks of kKeyBlock positions aligned at position 0. Each key block is converted to f32
// once per task (K transposed to [d][kKeyBlock], V as [kKeyBlock][d]) and serves every query row of the task:
// scores as row-times-block products (no horizontal sums), one running-max update per row and block, the
// exponentials vectorized (ExpGgml), then p times V into the row's f32 accumulator. A row visits exactly the
// blocks that hold a key in its causal / window range, in order, so its result does not depend on the other rows
// of its task (decode, prompt tiles and continuous batching give it the same bits). The op contract's 16-bit
// rounding: q rounded to the cache type, p_j rounded to it before it weights v_j, the denominator sums the f32 p_j.
// 32 query tokens per task (16 before session 9): the key blocks' conversion, redone by every task, serves twice
// the rows; a pp512 task list is still 16 tiles x the KV heads per layer.
constexpr int64_t kTileTokens = 32;
constexpr int64_t kKeyBlock = 32;
constexpr int kRowGroup = 8;  // query rows computed together (independent FMA chains)

// dst[0..d) = the cache row src as f32 (d a multiple of the vector length).
template <class D, class C>
HWY_INLINE void LoadRowF32(D df, const C* HWY_RESTRICT src, float* HWY_RESTRICT dst, int64_t d) {
  const int64_t n = (int64_t)hn::Lanes(df);
  for (int64_t i = 0; i < d; i += n) {
    if constexpr (std::is_same_v<C, float>) {
      hn::StoreU(hn::LoadU(df, src + i), df, dst + i);
    } else {
      const hn::Rebind<C, D> dc;
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dc, src + i)), df, dst + i);
    }
  }
}

// sc[u][0..kKeyBlock) = scale * (q row u . the block's keys) for the NR rows at q (d apart), kt the block's keys
// transposed ([d][kKeyBlock] f32); every row's lanes summed over i in order (compile-time row count: a runtime
// one made the compiler branch inside the FMA loop).
template <int NR, class D>
HWY_INLINE void ScoresOfRows(D df, const float* HWY_RESTRICT q, int64_t d, const float* HWY_RESTRICT kt,
                             float scale, float* HWY_RESTRICT sc) {
  using V = hn::Vec<D>;
  constexpr int64_t N = (int64_t)hn::MaxLanes(D());
  constexpr int64_t nk = kKeyBlock / N;
  V s[NR][nk];
  for (int u = 0; u < NR; ++u)
    for (int64_t v = 0; v < nk; ++v) s[u][v] = hn::Zero(df);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t v = 0; v < nk; ++v) {
      const V kv = hn::LoadU(df, kt + i * kKeyBlock + v * N);
      for (int u = 0; u < NR; ++u) s[u][v] = hn::MulAdd(hn::Set(df, q[u * d + i]), kv, s[u][v]);
    }
  }
  const V vscale = hn::Set(df, scale);
  for (int u = 0; u < NR; ++u)
    for (int64_t v = 0; v < nk; ++v) hn::StoreU(hn::Mul(s[u][v], vscale), df, sc + u * kKeyBlock + v * N);
}

// For each of the NR rows u: a_u[0..NV * N) = a_u * correction_u + sum_{c = c_lo..c_hi} p_u[c] * v_c[0..NV * N),
// v_c = vf + c * d, in c order; a_u = a[u], p_u = p + u * kKeyBlock. Rows that share a key range go through together:
// one row's NV accumulators are NV dependent FMA chains, too few to cover the FMA latency, and the rows' chains
// interleave without changing any row's order.
template <int NR, int NV, class D>
HWY_INLINE void AccumulatePV(D df, float* const (&a)[NR], const float* HWY_RESTRICT vf, int64_t d,
                             const float* HWY_RESTRICT p, int64_t c_lo, int64_t c_hi, const float (&correction)[NR]) {
  using V = hn::Vec<D>;
  constexpr int64_t N = (int64_t)hn::MaxLanes(D());
  V o[NR][NV];
  for (int u = 0; u < NR; ++u) {
    const V vc = hn::Set(df, correction[u]);
    for (int v = 0; v < NV; ++v) o[u][v] = hn::Mul(hn::LoadU(df, a[u] + v * N), vc);
  }
  for (int64_t c = c_lo; c <= c_hi; ++c) {
    V pc[NR];
    for (int u = 0; u < NR; ++u) pc[u] = hn::Set(df, p[u * kKeyBlock + c]);
    for (int v = 0; v < NV; ++v) {
      const V vv = hn::LoadU(df, vf + c * d + v * N);
      for (int u = 0; u < NR; ++u) o[u][v] = hn::MulAdd(pc[u], vv, o[u][v]);
    }
  }
  for (int u = 0; u < NR; ++u)
    for (int v = 0; v < NV; ++v) hn::StoreU(o[u][v], df, a[u] + v * N);
}

// AccumulatePV over the head dimension, 4 vectors at a time.
template <int NR, class D>
HWY_INLINE void AccumulatePVRows(D df, float* const (&a)[NR], const float* HWY_RESTRICT vf, int64_t d,
                                 const float* HWY_RESTRICT p, int64_t c_lo, int64_t c_hi,
                                 const float (&correction)[NR]) {
  const int64_t N = (int64_t)hn::Lanes(df);
  for (int64_t i0 = 0; i0 < d; i0 += 4 * N) {
    float* ai[NR];
    for (int u = 0; u < NR; ++u) ai[u] = a[u] + i0;
    switch (std::min<int64_t>(4, (d - i0) / N)) {
      case 4: AccumulatePV<NR, 4>(df, ai, vf + i0, d, p, c_lo, c_hi, correction); break;
      case 3: AccumulatePV<NR, 3>(df, ai, vf + i0, d, p, c_lo, c_hi, correction); break;
      case 2: AccumulatePV<NR, 2>(df, ai, vf + i0, d, p, c_lo, c_hi, correction); break;
      default: AccumulatePV<NR, 1>(df, ai, vf + i0, d, p, c_lo, c_hi, correction); break;
    }
  }
}

// True where the blocked kernel serves this head size on the current target, unless RBEE_CPU_BLOCKED_ATTENTION=0
// (A/B runs: the unblocked kernel below). Its scores are summed in another order than the unblocked kernel's
// (within the op contract, the conformance cases pass); MultiDevice.TensorSplitDefaultModelUnevenHeads reports
// the one near-tie greedy token this moves (reference vs tensor split, both on this kernel).
inline bool BlockedAttentionFits(int64_t d) {
  static const bool wanted = env::flag_or("RBEE_CPU_BLOCKED_ATTENTION", true);
  if (!wanted) return false;
  const hn::ScalableTag<float> df;
  const int64_t n = (int64_t)hn::Lanes(df);
  return n >= 4 && d % n == 0 && d <= 256 && kKeyBlock % n == 0;
}

template <class C>
void PagedAttentionBlocked(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                           const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                           const rbee::AttentionParams& params, rbee::Tensor& out) {
  const PagedArgs<C> a(q, k_cache, v_cache, seq_info, block_tables, out);
  const int64_t d = a.d, group = a.group;

  struct Task {
    int64_t b, t0, nt, g;
  };
  std::vector<Task> tasks;
  for (int64_t b = 0; b < a.n_seq; ++b) {
    for (int64_t i = 0; i < a.q_len(b); i += kTileTokens) {
      for (int64_t g = 0; g < a.hkv; ++g)
        tasks.push_back({b, a.q_start(b) + i, std::min<int64_t>(kTileTokens, a.q_len(b) - i), g});
    }
  }
  rbee::ThreadPool::global().run((int64_t)tasks.size(), [&](int64_t ti) {
    const hn::ScalableTag<float> df;
    const int64_t N = (int64_t)hn::Lanes(df);
    using V = hn::Vec<decltype(df)>;
    const Task& task = tasks[(size_t)ti];
    const int64_t b = task.b;
    const int32_t* table = a.table(b);
    const int64_t rows = task.nt * group;  // row r: token t0 + r / group, head g * group + r % group
    float* qf = rbee::cpu::scratch<float>(0, (size_t)(rows * d));
    float* acc = rbee::cpu::scratch<float>(1, (size_t)(rows * d));
    float* kt = rbee::cpu::scratch<float>(2, (size_t)(d * kKeyBlock));
    float* vf = rbee::cpu::scratch<float>(3, (size_t)(kKeyBlock * d));
    float* sc = rbee::cpu::scratch<float>(4, (size_t)(kRowGroup * kKeyBlock));
    float* state = rbee::cpu::scratch<float>(5, (size_t)(2 * rows));  // running max, running sum per row
    float* krow = rbee::cpu::scratch<float>(6, (size_t)d);
    int64_t* range = rbee::cpu::scratch<int64_t>(0, (size_t)(2 * rows));  // first, last key per row
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = task.t0 + r / group, h = task.g * group + r % group;
      const int64_t pos = a.position(b, t);
      const int64_t first = FirstKey(pos, params.window);
      range[2 * r] = first;
      range[2 * r + 1] = pos;
      lo = std::min(lo, first);
      hi = std::max(hi, pos);
      const float* qv = a.q_row(t, h);
      if (std::is_same_v<C, hwy::float16_t> && a.q_s2 == 1) {
        // RoundToCache<f16> by vectors: the conversion rounds to nearest even (as the p_j rounding below).
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        for (int64_t i = 0; i < d; i += N) hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(dh, hn::LoadU(df, qv + i))), df, qf + r * d + i);
      } else {
        for (int64_t i = 0; i < d; ++i) qf[r * d + i] = RoundToCache<C>(qv[i * a.q_s2]);
      }
      for (int64_t i = 0; i < d; ++i) acc[r * d + i] = 0.0f;
      state[2 * r] = -std::numeric_limits<float>::infinity();
      state[2 * r + 1] = 0.0f;
    }
    for (int64_t j0 = lo / kKeyBlock * kKeyBlock; j0 <= hi; j0 += kKeyBlock) {
      const int64_t j1 = std::min(j0 + kKeyBlock, hi + 1);
      // The block's keys and values as f32; positions past j1 are zeros (their p is 0).
      for (int64_t j = j0; j < j0 + kKeyBlock; ++j) {
        const int64_t c = j - j0;
        if (j < j1 && j >= lo) {
          const int64_t slot = a.slot(table, j);
          LoadRowF32(df, a.k_row(slot, task.g), krow, d);
          for (int64_t i = 0; i < d; ++i) kt[i * kKeyBlock + c] = krow[i];
          LoadRowF32(df, a.v_row(slot, task.g), vf + c * d, d);
        } else {
          for (int64_t i = 0; i < d; ++i) kt[i * kKeyBlock + c] = 0.0f;
          for (int64_t i = 0; i < d; ++i) vf[c * d + i] = 0.0f;
        }
      }
      const int64_t nk = kKeyBlock / N;  // score vectors per row
      for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
        const int nr = (int)std::min<int64_t>(kRowGroup, rows - r0);
        bool live[kRowGroup] = {};
        bool any = false;
        for (int u = 0; u < nr; ++u) {
          live[u] = range[2 * (r0 + u)] < j0 + kKeyBlock && range[2 * (r0 + u) + 1] >= j0;
          any = any || live[u];
        }
        if (!any) continue;
        // Scores of the rows: s[u][c] = scale * sum_i q[u][i] k[c][i].
        static_assert(kRowGroup == 8);
        switch (nr) {
          case 8: ScoresOfRows<8>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 7: ScoresOfRows<7>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 6: ScoresOfRows<6>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 5: ScoresOfRows<5>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 4: ScoresOfRows<4>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 3: ScoresOfRows<3>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          case 2: ScoresOfRows<2>(df, qf + r0 * d, d, kt, params.scale, sc); break;
          default: ScoresOfRows<1>(df, qf + r0 * d, d, kt, params.scale, sc); break;
        }
        float corrections[kRowGroup];
        int64_t c_los[kRowGroup], c_his[kRowGroup];
        for (int u = 0; u < nr; ++u) {
          if (!live[u]) continue;
          const int64_t r = r0 + u;
          float* su = sc + u * kKeyBlock;
          const int64_t c_lo = std::max<int64_t>(range[2 * r] - j0, 0);
          const int64_t c_hi = std::min<int64_t>(range[2 * r + 1] - j0, kKeyBlock - 1);  // inclusive
          c_los[u] = c_lo;
          c_his[u] = c_hi;
          float bmax = -std::numeric_limits<float>::infinity();
          if (c_lo == 0 && c_hi == kKeyBlock - 1 && !(params.softcap > 0.f)) {
            // The whole block is in the row's range and nothing is capped (most blocks of a prompt): the same
            // maximum from vectors (max is exact; a +-0 tie gives exp(s - m) the same bits either way).
            V m = hn::Set(df, -std::numeric_limits<float>::infinity());
            for (int64_t v = 0; v < nk; ++v) m = hn::Max(m, hn::LoadU(df, su + v * N));
            bmax = hn::GetLane(hn::MaxOfLanes(df, m));
          } else {
            for (int64_t c = 0; c < kKeyBlock; ++c) {
              if (c < c_lo || c > c_hi) {
                su[c] = -std::numeric_limits<float>::infinity();
                continue;
              }
              su[c] = attention::soft_cap(su[c], params.softcap);
              bmax = std::max(bmax, su[c]);
            }
          }
          const float m_old = state[2 * r], m_new = std::max(m_old, bmax);
          const float correction = std::exp(m_old - m_new);  // 0 on the row's first block
          const V vm = hn::Set(df, m_new);
          V vsum = hn::Zero(df);
          for (int64_t v = 0; v < nk; ++v) {
            const V x = hn::LoadU(df, su + v * N);
            // Masked keys (-inf) give exact zeros; the others exp(s - m) <= 1.
            const auto valid = hn::Gt(x, hn::Set(df, -std::numeric_limits<float>::infinity()));
            const V p = hn::IfThenElseZero(valid, ExpGgml(df, hn::Max(hn::Sub(x, vm), hn::Set(df, -104.0f))));
            vsum = hn::Add(vsum, p);
            if constexpr (std::is_same_v<C, hwy::float16_t>) {
              const hn::Rebind<hwy::float16_t, decltype(df)> dh;
              hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(dh, p)), df, su + v * N);  // p rounded to f16
            } else {
              hn::StoreU(p, df, su + v * N);
            }
          }
          state[2 * r] = m_new;
          state[2 * r + 1] = state[2 * r + 1] * correction + hn::GetLane(hn::SumOfLanes(df, vsum));
          if constexpr (std::is_same_v<C, hwy::bfloat16_t>) {
            for (int64_t c = c_lo; c <= c_hi; ++c) su[c] = RoundToCache<C>(su[c]);
          }
          corrections[u] = correction;
        }
        // acc = acc * correction + sum_c p_c v_c per row, the head dim in registers; runs of four (or two) live rows
        // with the same key range (every block inside the causal range) together.
        for (int u = 0; u < nr;) {
          if (!live[u]) {
            ++u;
            continue;
          }
          const auto same = [&](int v) {
            return v < nr && live[v] && c_los[v] == c_los[u] && c_his[v] == c_his[u];
          };
          const int span = same(u + 1) ? (same(u + 2) && same(u + 3) ? 4 : 2) : 1;
          // Rows u .. u + NR - 1: their accumulators and corrections, p from row u's scores onwards.
          const auto rows_together = [&]<int NR>(std::integral_constant<int, NR>) {
            float* a[NR];
            float corr[NR];
            for (int i = 0; i < NR; ++i) {
              a[i] = acc + (r0 + u + i) * d;
              corr[i] = corrections[u + i];
            }
            AccumulatePVRows<NR>(df, a, vf, d, sc + u * kKeyBlock, c_los[u], c_his[u], corr);
          };
          if (span == 4) rows_together(std::integral_constant<int, 4>{});
          else if (span == 2) rows_together(std::integral_constant<int, 2>{});
          else rows_together(std::integral_constant<int, 1>{});
          u += span;
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = task.t0 + r / group, h = task.g * group + r % group;
      const float sum = state[2 * r + 1];
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;
      float* o = a.out_row(t, h);
      for (int64_t i = 0; i < d; ++i) o[i] = acc[r * d + i] * inv;
    }
  });
}

// ---- f32 cache without softcap: llama.cpp's numerics ----
// The same attention, computed in the order of ggml's CPU backend without flash attention (a dense softmax over
// the cache row, then probabilities times V), so that an f32 cache gives llama.cpp's results bit for bit:
//  - s_j = dot(k_j, q) * scale, the dot summed as ggml_vec_dot_f32 does (VecDotOrder);
//  - e_j = exp(s_j - max) (ExpGgml), sum = the f64 sum of 8-key chunk sums (Hsum8 order, chunks aligned at
//    key 0), p_j = e_j * f32(1 / sum);
//  - o = sum_j p_j v_j with lanes by key position: for a sequence chunk of >= 2 queries one chain per lane
//    j mod 8 and the Hsum8 reduction (llamafile's tinyBLAS, which llama.cpp uses for a batch), for a single
//    query 32 lanes j mod 32 and ggml_vec_dot_f32's reduction (decode). The choice is per sequence, so a
//    stream's result never depends on the other sequences of the batch; it does depend on whether its chunk has
//    one query or more, so batch-invariant mode (backends/common/batch_invariant.h) takes the 32 lanes for all.
// Keys outside the causal range or the window take no part, as ggml's -inf mask makes them exact zeros.

// ggml_vec_dot_f32's reduction of its 32 lane sums P[8a + l] (4 accumulators of 8 lanes): accumulators 0+2 and
// 1+3, then their sum, then the 128-bit halves, then two horizontal adds. Elementwise over the vectors Vec.
template <class V>
HWY_INLINE V Reduce32(const V* P) {
  V x[8];
  for (int l = 0; l < 8; ++l) x[l] = (P[l] + P[16 + l]) + (P[8 + l] + P[24 + l]);
  V t[4];
  for (int m = 0; m < 4; ++m) t[m] = x[m] + x[m + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}
// hsum_float_8's order over 8 lanes: the 128-bit halves, then lanes 0+2 and 1+3, then those two.
template <class V>
HWY_INLINE V Hsum8(const V* a) {
  V h[4];
  for (int m = 0; m < 4; ++m) h[m] = a[m] + a[m + 4];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// sum_i x[i] * y[i] as ggml_vec_dot_f32 computes it with 8-lane vectors: lane sums P[e] over whole steps of 32
// (fma, steps in order), Reduce32, then the leftover elements by scalar fma.
float VecDotOrder(const float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n) {
  const hn::CappedTag<float, 16> df;
  const int64_t N = (int64_t)hn::Lanes(df);
  const int64_t np = n & ~int64_t{31};
  HWY_ALIGN float P[32];
  for (int64_t e = 0; e < 32; e += N) {
    auto acc = hn::Zero(df);
    for (int64_t i = 0; i < np; i += 32) acc = hn::MulAdd(hn::LoadU(df, x + i + e), hn::LoadU(df, y + i + e), acc);
    hn::StoreU(acc, df, P + e);
  }
  float s = Reduce32(P);
  for (int64_t i = np; i < n; ++i) s = std::fma(x[i], y[i], s);
  return s;
}

void PagedAttentionGgmlF32(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                           const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                           const rbee::AttentionParams& params, rbee::Tensor& out) {
  const PagedArgs<float> a(q, k_cache, v_cache, seq_info, block_tables, out);
  const int64_t hq = a.hq, d = a.d;
  // q rows are copied when their head dim is strided (VecDotOrder reads contiguous vectors).
  const bool q_contiguous_rows = a.q_s2 == 1;
  const bool one_order = rbee::batch_invariant();  // P.V in 32 lanes for chunks of any length

  const std::vector<std::pair<int64_t, int64_t>> tokens = a.tokens();
  rbee::ThreadPool::global().run((int64_t)tokens.size() * hq, [&](int64_t task) {
    const hn::CappedTag<float, 16> df;
    const int64_t N = (int64_t)hn::Lanes(df);
    using V = hn::Vec<decltype(df)>;
    const auto [b, t] = tokens[(size_t)(task / hq)];
    const int64_t h = task % hq, g = h / a.group;
    const int64_t q_len = a.q_len(b);
    const int64_t pos = a.position(b, t);
    const int64_t first = FirstKey(pos, params.window);
    const int32_t* table = a.table(b);
    const float* qv = a.q_row(t, h);
    if (!q_contiguous_rows) {
      float* qcopy = rbee::cpu::scratch<float>(2, (size_t)d);
      for (int64_t i = 0; i < d; ++i) qcopy[i] = qv[i * a.q_s2];
      qv = qcopy;
    }
    // Scores, then exponentials over keys [0, padded) in place (the buffer is a whole number of vectors);
    // masked keys are exact zeros.
    const int64_t padded = (pos + 1 + 7) / 8 * 8, buffered = (padded + N - 1) / N * N;
    float* e = rbee::cpu::scratch<float>(0, (size_t)buffered);
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < buffered; ++j) {
      if (j < first || j > pos) {
        e[j] = -std::numeric_limits<float>::infinity();
        continue;
      }
      e[j] = VecDotOrder(a.k_row(a.slot(table, j), g), qv, d) * params.scale;
      max = std::max(max, e[j]);
    }
    const auto vmax = hn::Set(df, max);
    for (int64_t j = 0; j < buffered; j += N) hn::StoreU(ExpGgml(df, hn::Sub(hn::LoadU(df, e + j), vmax)), df, e + j);
    double sum = 0;
    for (int64_t j = 0; j < padded; j += 8) {
      for (int64_t l = 0; l < 8; ++l) {
        if (j + l < first || j + l > pos) e[j + l] = 0.0f;
      }
      sum += (double)Hsum8(e + j);
    }
    const float inv = (float)(1.0 / sum);
    // o = sum_j p_j v_j in lanes of j mod `lanes`, vectorized over the head dim.
    const int lanes = q_len >= 2 && !one_order ? 8 : 32;
    float* acc = rbee::cpu::scratch<float>(1, (size_t)(lanes * d));
    for (int64_t i = 0; i < lanes * d; ++i) acc[i] = 0.0f;
    for (int64_t j = first; j <= pos; ++j) {
      const float p = e[j] * inv;
      const float* vj = a.v_row(a.slot(table, j), g);
      float* a = acc + (j % lanes) * d;
      const auto vp = hn::Set(df, p);
      int64_t i = 0;
      for (; i + N <= d; i += N) hn::StoreU(hn::MulAdd(hn::LoadU(df, vj + i), vp, hn::LoadU(df, a + i)), df, a + i);
      for (; i < d; ++i) a[i] = std::fma(vj[i], p, a[i]);
    }
    float* o = a.out_row(t, h);
    int64_t i = 0;
    for (; i + N <= d; i += N) {
      V part[32];
      for (int l = 0; l < lanes; ++l) part[l] = hn::LoadU(df, acc + l * d + i);
      hn::StoreU(lanes == 8 ? Hsum8(part) : Reduce32(part), df, o + i);
    }
    for (; i < d; ++i) {
      float part[32];
      for (int l = 0; l < lanes; ++l) part[l] = acc[l * d + i];
      o[i] = lanes == 8 ? Hsum8(part) : Reduce32(part);
    }
  });
}

void PagedAttention(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                    const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                    const rbee::AttentionParams& params, rbee::Tensor& out) {
  const bool blocked = BlockedAttentionFits(k_cache.dim(3));
  switch (k_cache.dtype()) {
    case rbee::DType::F32:
      if (params.softcap <= 0.0f) return PagedAttentionGgmlF32(q, k_cache, v_cache, seq_info, block_tables, params, out);
      if (blocked) return PagedAttentionBlocked<float>(q, k_cache, v_cache, seq_info, block_tables, params, out);
      return PagedAttentionTyped<float>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    case rbee::DType::F16:
      if (blocked) return PagedAttentionBlocked<hwy::float16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
      return PagedAttentionTyped<hwy::float16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    case rbee::DType::BF16:
      if (blocked) return PagedAttentionBlocked<hwy::bfloat16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
      return PagedAttentionTyped<hwy::bfloat16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    default:
      RBEE_THROW(rbee::ErrorCode::Unsupported, "paged_attention: cache dtype {}", rbee::dtype_name(k_cache.dtype()));
  }
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {

HWY_EXPORT(PagedAttention);

void CpuKernels::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                 Tensor& out) {
  HWY_DYNAMIC_DISPATCH(PagedAttention)(q, k_cache, v_cache, seq_info, block_tables, params, out);
}

void CpuKernels::kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                                Tensor& v_cache) {
  const int64_t n = k.dim(0), hkv = k.dim(1), d = k.dim(2);
  const int32_t* slot = static_cast<const int32_t*>(slots.data());
  for (const auto& pair : {std::pair<const Tensor*, Tensor*>{&k, &k_cache}, {&v, &v_cache}}) {
    const Tensor& s = *pair.first;
    Tensor* dst = pair.second;  // a plain variable: C++20 lambdas may not capture structured bindings (clang 14)
    visit_float_dtype(s.dtype(), [&](auto in_tag) {
      using I = decltype(in_tag);
      visit_float_dtype(dst->dtype(), [&](auto out_tag) {
        using O = decltype(out_tag);
        const I* sp = static_cast<const I*>(s.data());
        O* dp = static_cast<O*>(dst->data());
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t h = 0; h < hkv; ++h) {
            const I* row = sp + r * s.stride(0) + h * s.stride(1);
            O* o = dp + ((int64_t)slot[r] * hkv + h) * d;
            for (int64_t i = 0; i < d; ++i) o[i] = from_float<O>(to_float(row[i]));
          }
        }
      });
    });
  }
}

}  // namespace rbee::cpu
#endif
