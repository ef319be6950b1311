// CPU attention, flash style: out = softmax(mask(softcap(q k^T * scale))) v without the Tq x Tk score matrix.
//
// Work is cut into rows: for one (batch, kv head) the rows are the (query i, head g of the kv head's group)
// pairs, ordered query-major (r = i * group + g), so grouped-query heads share every key and value block they
// read. A task takes up to kRowBlock consecutive rows, walks the keys those rows may see in blocks of kKeyBlock
// (online softmax: running max m, running sum l, output rescaled by exp(m_old - m_new)), and writes O / l.
// Masking per row: query i sits at position p = Tk - Tq + i; causal keeps keys <= p, a window keeps keys
// > p - window. Key blocks outside every row's range are never visited.
//
// When (batch, kv head, row block) items are too few to keep the threads busy (decode: Tq = 1), each item's
// key range is also split across tasks; each split keeps its own (m, l, O) and a second pass merges them:
// O = sum_s exp(m_s - M) O_s / sum_s exp(m_s - M) l_s with M = max_s m_s.
//
// f32 computes in f32 SIMD; f16/bf16 widen q, and each key/value block, to f32; f64 computes in double.
// A query that sees no key at all (causal with Tq > Tk) gets zeros.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/common/attention_math.h"
#include "backends/cpu/cpu_attention_blocks.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"

namespace rbee::cpu {

namespace {

constexpr int64_t kRowBlock = 32;          // rows per task: enough to reuse each key/value block from cache
constexpr int64_t kKeyBlock = 64;          // keys per online-softmax step (score tile kRowBlock x kKeyBlock)
constexpr int64_t kMinKeysPerSplit = 256;  // a split below this costs more in merging than it gains

// The call's sizes (attention_math.h) and how this backend splits the work.
struct Geometry : attention::AttentionShape {
  int64_t row_block;   // rows per task, min(kRowBlock, rows)
  int64_t row_blocks;  // ceil(rows / row_block)
  int64_t splits;      // key-range splits per item
  Strides qs, ks, vs;  // element strides of q, k, v [B, H, T, D]
  Strides os;          // element strides of out [B, Hq, Tq, Dv] (last one 1)
  AttentionParams params;
};

// Keys [lo, hi) that query i may see.
void visible_keys(const Geometry& g, int64_t i, int64_t& lo, int64_t& hi) {
  attention::visible_keys(g.tq, g.tk, g.params.causal, g.params.window, i, lo, hi);
}

int64_t choose_splits(int64_t items, int64_t tk) {
  const int64_t threads = ThreadPool::global().size();
  if (items >= 2 * threads || tk < 2 * kMinKeysPerSplit) return 1;
  const int64_t wanted = (4 * threads + items - 1) / items;
  return std::max<int64_t>(1, std::min(wanted, tk / kMinKeysPerSplit));
}

// Partial softmax states of split tasks: for task t = item * splits + split and row rr of its block,
// m, l at [t * row_block + rr] and the unnormalized output at [(t * row_block + rr) * dim_v].
template <class C>
struct Partials {
  std::vector<C> m, l, o;
};

template <class T>
class AttentionRun {
 public:
  using C = nn_compute_t<T>;

  AttentionRun(const Geometry& g, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out)
      : g_(g),
        q_(static_cast<const T*>(q.data())),
        k_(static_cast<const T*>(k.data())),
        v_(static_cast<const T*>(v.data())),
        out_(static_cast<T*>(out.data())) {
    if (g_.splits > 1) {
      const size_t slots = (size_t)(items() * g_.splits * g_.row_block);
      part_.m.resize(slots);
      part_.l.resize(slots);
      part_.o.resize(slots * (size_t)g_.dim_v);
    }
  }

  int64_t items() const { return g_.batch * g_.kv_heads * g_.row_blocks; }

  void run() {
    ThreadPool& pool = ThreadPool::global();
    pool.run(items() * g_.splits, [&](int64_t t) { task(t / g_.splits, t % g_.splits); });
    if (g_.splits > 1) {
      pool.parallel_for(items(), 1, [&](int64_t i0, int64_t i1) {
        for (int64_t item = i0; item < i1; ++item) merge(item);
      });
    }
  }

 private:
  struct Item {
    int64_t b, kv_head, r0, nr;
  };
  // Items are numbered so that, for each (batch, kv head), the last row blocks (the longest under a causal
  // mask) come first and the dynamic scheduler balances the short ones at the end.
  Item item_at(int64_t item) const {
    Item it;
    const int64_t per_batch = g_.kv_heads * g_.row_blocks;
    it.b = item / per_batch;
    const int64_t rem = item % per_batch;
    it.kv_head = rem / g_.row_blocks;
    const int64_t rb = g_.row_blocks - 1 - rem % g_.row_blocks;
    it.r0 = rb * g_.row_block;
    it.nr = std::min(g_.row_block, g_.rows - it.r0);
    return it;
  }
  int64_t head_of(const Item& it, int64_t r) const { return it.kv_head * g_.group + r % g_.group; }
  T* out_row(const Item& it, int64_t r) const {
    return out_ + it.b * g_.os[0] + head_of(it, r) * g_.os[1] + (r / g_.group) * g_.os[2];
  }

  void task(int64_t item, int64_t split) {
    const Item it = item_at(item);
    const int64_t nr = it.nr, dim = g_.dim, dim_v = g_.dim_v;
    C* q = scratch<C>(0, (size_t)(nr * dim));
    C* s = scratch<C>(1, (size_t)(nr * kKeyBlock));
    C* o = scratch<C>(2, (size_t)(nr * dim_v));
    C* state = scratch<C>(3, (size_t)(3 * nr));
    C *m = state, *l = state + nr, *alpha = state + 2 * nr;
    int64_t* range = scratch<int64_t>(0, (size_t)(2 * nr));  // absolute [lo, hi) per row
    int32_t* bounds = scratch<int32_t>(0, (size_t)(2 * nr));  // the same, relative to the current block
    int32_t *lo = bounds, *hi = bounds + nr;

    const C scale = (C)g_.params.scale;
    for (int64_t rr = 0; rr < nr; ++rr) {
      const int64_t r = it.r0 + rr, i = r / g_.group;
      const T* src = q_ + it.b * g_.qs[0] + head_of(it, r) * g_.qs[1] + i * g_.qs[2];
      C* qrow = q + rr * dim;
      load_row(src, qrow, dim);
      for (int64_t d = 0; d < dim; ++d) qrow[d] *= scale;
      visible_keys(g_, i, range[2 * rr], range[2 * rr + 1]);
      m[rr] = -std::numeric_limits<C>::infinity();
      l[rr] = 0;
    }
    std::fill(o, o + nr * dim_v, C(0));

    // Rows are query-major, so both ends of the visible range grow with the row.
    int64_t begin = range[0], end = range[2 * nr - 1];
    if (g_.splits > 1 && end > begin) {
      const int64_t per_split = ((end - begin + g_.splits - 1) / g_.splits + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
      const int64_t split_begin = std::min(end, begin + split * per_split);
      end = std::min(end, split_begin + per_split);
      begin = split_begin;
    }

    const T* kbase = k_ + it.b * g_.ks[0] + it.kv_head * g_.ks[1];
    const T* vbase = v_ + it.b * g_.vs[0] + it.kv_head * g_.vs[1];
    for (int64_t kb = begin; kb < end; kb += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, end - kb);
      for (int64_t rr = 0; rr < nr; ++rr) {
        lo[rr] = (int32_t)std::clamp<int64_t>(range[2 * rr] - kb, 0, nk);
        hi[rr] = (int32_t)std::clamp<int64_t>(range[2 * rr + 1] - kb, 0, nk);
      }
      int64_t k_stride = g_.ks[2], v_stride = g_.vs[2];
      const C* kblk = block(kbase + kb * k_stride, k_stride, nk, dim, 4);
      if (is_half_v<T>) k_stride = dim;
      attn::scores(q, dim, nr, kblk, k_stride, nk, dim, s, kKeyBlock);
      attn::softmax_step(s, kKeyBlock, nr, nk, lo, hi, (C)g_.params.softcap, m, l, alpha);
      const C* vblk = block(vbase + kb * v_stride, v_stride, nk, dim_v, 5);
      if (is_half_v<T>) v_stride = dim_v;
      attn::accumulate(s, kKeyBlock, nr, vblk, v_stride, nk, dim_v, alpha, o, dim_v);
    }

    if (g_.splits == 1) {
      for (int64_t rr = 0; rr < nr; ++rr) finish_row(o + rr * dim_v, l[rr], out_row(it, it.r0 + rr));
      return;
    }
    const int64_t slot = (item * g_.splits + split) * g_.row_block;
    std::copy(m, m + nr, part_.m.begin() + slot);
    std::copy(l, l + nr, part_.l.begin() + slot);
    std::copy(o, o + nr * dim_v, part_.o.begin() + slot * dim_v);
  }

  // nk rows of `width` values starting at src (row stride `stride`) in the compute type: in place for
  // f32/f64, widened into scratch slot `slot` (row stride = width) for f16/bf16.
  const C* block(const T* src, int64_t stride, int64_t nk, int64_t width, int slot) const {
    if constexpr (is_half_v<T>) {
      float* buf = scratch<float>(slot, (size_t)(nk * width));
      for (int64_t j = 0; j < nk; ++j) load_row(src + j * stride, buf + j * width, width);
      return buf;
    } else {
      return src;
    }
  }

  // dst = o / l, or zeros for a row that saw no key (l = 0).
  void finish_row(C* o, C l, T* dst) const {
    const C inv = l > 0 ? C(1) / l : C(0);
    for (int64_t c = 0; c < g_.dim_v; ++c) o[c] *= inv;
    store_row(o, dst, g_.dim_v);
  }

  void merge(int64_t item) {
    const Item it = item_at(item);
    const int64_t dim_v = g_.dim_v;
    C* acc = scratch<C>(0, (size_t)dim_v);
    for (int64_t rr = 0; rr < it.nr; ++rr) {
      auto slot = [&](int64_t split) { return (item * g_.splits + split) * g_.row_block + rr; };
      C max = -std::numeric_limits<C>::infinity();
      for (int64_t sp = 0; sp < g_.splits; ++sp) max = std::max(max, part_.m[slot(sp)]);
      std::fill(acc, acc + dim_v, C(0));
      C l = 0;
      if (max != -std::numeric_limits<C>::infinity()) {
        for (int64_t sp = 0; sp < g_.splits; ++sp) {
          const C w = std::exp(part_.m[slot(sp)] - max);  // 0 for a split that saw no key
          if (w == 0) continue;
          l += w * part_.l[slot(sp)];
          const C* o = part_.o.data() + slot(sp) * dim_v;
          for (int64_t c = 0; c < dim_v; ++c) acc[c] += w * o[c];
        }
      }
      finish_row(acc, l, out_row(it, it.r0 + rr));
    }
  }

  const Geometry& g_;
  const T* q_;
  const T* k_;
  const T* v_;
  T* out_;
  Partials<C> part_;
};

}  // namespace

void CpuKernels::attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                           Tensor& out) {
  Geometry g;
  static_cast<attention::AttentionShape&>(g) = attention::attention_shape(q, k, v);
  if (g.batch == 0 || g.rows == 0 || g.dim_v == 0) return;
  g.row_block = std::min(kRowBlock, g.rows);
  g.row_blocks = (g.rows + g.row_block - 1) / g.row_block;
  g.splits = choose_splits(g.batch * g.kv_heads * g.row_blocks, g.tk);
  g.qs = q.strides();
  g.ks = k.strides();
  g.vs = v.strides();
  g.os = out.strides();
  g.params = params;
  visit_float_dtype(q.dtype(), [&](auto tag) { AttentionRun<decltype(tag)>(g, q, k, v, out).run(); });
}

}  // namespace rbee::cpu
