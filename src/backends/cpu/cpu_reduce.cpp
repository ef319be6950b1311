// CPU reductions (sum, min, max, argmin, argmax over any axis), softmax over the last axis and argsort.
//
// Conventions shared by the kernels here (the front-end in src/ops/reduce.cpp relies on them):
// - Sums of floating dtypes accumulate in double and round once; integer sums wrap around like the dtype.
// - Min/Max/ArgMin/ArgMax: a NaN wins (the first NaN of the slice, its index for Arg*); otherwise ties keep the
//   first index. Min/Max return an element of x unchanged.
// - Argsort: NaN orders above every number (+inf included): last when ascending, first when descending; equal
//   keys (and NaNs among themselves) keep their original order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "backends/common/axis_split.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/simd_reduce.h"

namespace rbee::cpu {

namespace {

// Row-major without gaps. Empty tensors count as dense whatever their strides (Tensor::is_contiguous() can
// answer false for them).
bool dense(const Tensor& t) { return t.numel() == 0 || t.is_contiguous(); }

// Rows are handed to the thread pool in chunks of at least this many elements.
constexpr int64_t kGrainElements = 1 << 15;
// Kept inner columns one task covers when reducing a non-last axis: each reduced row contributes one contiguous
// segment of this many elements (long runs stream best; 1024 was twice as slow as 16384 for a column sum of a
// [4096, 32000] f32 matrix), and the task's accumulators (heap, at most 128 KB of doubles) stay in L2.
constexpr int64_t kInnerChunk = 16384;
// A task reducing a non-last axis covers at least this many of the reduced rows, so that merging the partial
// results of split row ranges stays cheap next to reading them.
constexpr int64_t kMinRowsPerSplit = 32;

// x seen as [outer, n, inner] around the reduced axis (out as [outer, inner]).
using axis::AxisSplit;
using axis::split_at;

int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(row_elements, 1));
}

template <class C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// Whether v replaces the current best of a Min (kMax false) or Max scan: a NaN replaces a number and nothing
// replaces a NaN; strict comparison keeps the first index among equal values.
template <bool kMax, class C>
inline bool better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(best)) return false;
    if (std::isnan(v)) return true;
  }
  return kMax ? v > best : v < best;
}

// Reducing a non-last axis: x is [outer, n, inner] with inner > 1. A task covers one outer index, one chunk of
// up to kInnerChunk inner columns and one range of the n reduced rows, reading each row's chunk as a contiguous
// segment. When outer * chunks alone would leave threads idle (a column sum of one matrix, say), the n rows are
// split into ranges too; their partial results are merged afterwards in range order, which keeps results
// deterministic and lets earlier rows win ties.
struct InnerPlan {
  int64_t chunks = 1, splits = 1, rows_per_split = 1;
  int64_t tasks(const AxisSplit& s) const { return s.outer * chunks * splits; }
};
InnerPlan plan_inner(const AxisSplit& s) {
  InnerPlan p;
  p.chunks = (s.inner + kInnerChunk - 1) / kInnerChunk;
  const int64_t wanted_tasks = 4 * (int64_t)ThreadPool::global().size();
  const int64_t base_tasks = s.outer * p.chunks;
  int64_t splits = 1;
  if (base_tasks < wanted_tasks && s.outer * s.n * s.inner >= kGrainElements) {
    splits = std::min((wanted_tasks + base_tasks - 1) / base_tasks, std::max<int64_t>(1, s.n / kMinRowsPerSplit));
  }
  p.rows_per_split = std::max<int64_t>(1, (s.n + splits - 1) / splits);
  p.splits = std::max<int64_t>(1, (s.n + p.rows_per_split - 1) / p.rows_per_split);
  return p;
}

// One task of an InnerPlan: outer index o, columns [c0, c0 + len), reduced rows [j0, j1), row range `split`.
struct InnerTask {
  int64_t o, c0, len, j0, j1, split;
};
// Runs fn(task, scratch) for every task; scratch = make_scratch(columns) is made once per batch of tasks that
// one thread runs, sized for the widest task.
template <class MakeScratch, class Fn>
void for_each_inner_task(const AxisSplit& s, const InnerPlan& p, MakeScratch&& make_scratch, Fn&& fn) {
  const int64_t width = std::min(s.inner, kInnerChunk);
  ThreadPool::global().parallel_for(p.tasks(s), grain_rows(p.rows_per_split * width), [&](int64_t begin, int64_t end) {
    auto scratch = make_scratch(width);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t split = t % p.splits, c = (t / p.splits) % p.chunks, o = t / (p.splits * p.chunks);
      const int64_t c0 = c * kInnerChunk, j0 = split * p.rows_per_split;
      fn(InnerTask{o, c0, std::min(kInnerChunk, s.inner - c0), j0, std::min(s.n, j0 + p.rows_per_split), split},
         scratch);
    }
  });
}

// ---- sums ----
// Integer sums accumulate in uint64_t: unsigned arithmetic wraps without UB, and converting back to T keeps the
// low bits, which is the dtype's own wraparound.

template <class T>
void sum_last_axis(const T* x, int64_t rows, int64_t n, T* out) {
  ThreadPool::global().parallel_for(rows, grain_rows(n), [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      sum_rows(x + begin * n, end - begin, n, out + begin);
    } else {
      for (int64_t r = begin; r < end; ++r) {
        const T* p = x + r * n;
        if constexpr (std::is_integral_v<T>) {
          uint64_t acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += (uint64_t)p[i];
          out[r] = (T)acc;
        } else {
          double acc = 0.0;
          for (int64_t i = 0; i < n; ++i) acc += (double)load(p[i]);
          out[r] = store<T>((compute_t<T>)acc);
        }
      }
    }
  });
}

template <class T>
void sum_inner_axis(const T* x, const AxisSplit& s, T* out) {
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
  auto finish = [](Acc v) {
    if constexpr (std::is_integral_v<T>) return (T)v;
    else return store<T>((compute_t<T>)v);
  };
  const InnerPlan p = plan_inner(s);
  // Split row ranges leave partial sums [splits, outer, inner] to add up at the end.
  std::vector<Acc> partial(p.splits > 1 ? (size_t)(p.splits * s.outer * s.inner) : 0);
  auto make_scratch = [](int64_t width) { return std::vector<Acc>((size_t)width); };
  for_each_inner_task(s, p, make_scratch, [&](const InnerTask& t, std::vector<Acc>& scratch) {
    Acc* acc = scratch.data();
    std::fill(acc, acc + t.len, Acc(0));
    const T* first = x + (t.o * s.n + t.j0) * s.inner + t.c0;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      add_rows(first, t.j1 - t.j0, s.inner, t.len, acc);
    } else {
      for (int64_t j = 0; j < t.j1 - t.j0; ++j) {
        const T* row = first + j * s.inner;
        for (int64_t c = 0; c < t.len; ++c) acc[c] += (Acc)load(row[c]);
      }
    }
    if (p.splits == 1) {
      T* dst = out + t.o * s.inner + t.c0;
      for (int64_t c = 0; c < t.len; ++c) dst[c] = finish(acc[c]);
    } else {
      std::copy(acc, acc + t.len, partial.begin() + (t.split * s.outer + t.o) * s.inner + t.c0);
    }
  });
  if (p.splits == 1) return;
  const int64_t slice = s.outer * s.inner;
  ThreadPool::global().parallel_for(slice, kGrainElements / p.splits + 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Acc total = 0;
      for (int64_t sp = 0; sp < p.splits; ++sp) total += partial[(size_t)(sp * slice + i)];
      out[i] = finish(total);
    }
  });
}

// ---- min / max / argmin / argmax ----
// Writes the best value (kArg false, into T) or its index (kArg true, into int64_t) of each slice.

template <class T, bool kMax, bool kArg, class O>
void extreme_last_axis(const T* x, int64_t rows, int64_t n, O* out) {
  ThreadPool::global().parallel_for(rows, grain_rows(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* p = x + r * n;
      compute_t<T> best = load(p[0]);
      int64_t index = 0;
      for (int64_t i = 1; i < n; ++i) {
        const compute_t<T> v = load(p[i]);
        if (better<kMax>(v, best)) best = v, index = i;
      }
      if constexpr (kArg) out[r] = index;
      else out[r] = p[index];
    }
  });
}

template <class T, bool kMax, bool kArg, class O>
void extreme_inner_axis(const T* x, const AxisSplit& s, O* out) {
  using C = compute_t<T>;
  const InnerPlan p = plan_inner(s);
  // Split row ranges leave partial winners [splits, outer, inner] (value and absolute row) to merge at the end.
  const size_t partial_size = p.splits > 1 ? (size_t)(p.splits * s.outer * s.inner) : 0;
  std::vector<C> partial_best(partial_size);
  std::vector<int64_t> partial_index(partial_size);
  auto finish = [&](int64_t o, int64_t col, int64_t j) {
    if constexpr (kArg) return j;
    else return x[(o * s.n + j) * s.inner + col];  // the element itself, bit for bit
  };
  struct Scratch {
    std::vector<C> best;
    std::vector<int64_t> index;
  };
  auto make_scratch = [](int64_t width) {
    return Scratch{std::vector<C>((size_t)width), std::vector<int64_t>((size_t)width)};
  };
  for_each_inner_task(s, p, make_scratch, [&](const InnerTask& t, Scratch& scratch) {
    C* best = scratch.best.data();
    int64_t* index = scratch.index.data();
    const T* first = x + (t.o * s.n + t.j0) * s.inner + t.c0;
    for (int64_t c = 0; c < t.len; ++c) best[c] = load(first[c]), index[c] = t.j0;
    for (int64_t j = t.j0 + 1; j < t.j1; ++j) {
      const T* row = x + (t.o * s.n + j) * s.inner + t.c0;
      for (int64_t c = 0; c < t.len; ++c) {
        const C v = load(row[c]);
        if (better<kMax>(v, best[c])) best[c] = v, index[c] = j;
      }
    }
    if (p.splits == 1) {
      O* dst = out + t.o * s.inner + t.c0;
      for (int64_t c = 0; c < t.len; ++c) dst[c] = finish(t.o, t.c0 + c, index[c]);
    } else {
      const size_t at = (size_t)((t.split * s.outer + t.o) * s.inner + t.c0);
      std::copy(best, best + t.len, partial_best.begin() + at);
      std::copy(index, index + t.len, partial_index.begin() + at);
    }
  });
  if (p.splits == 1) return;
  const int64_t slice = s.outer * s.inner;
  ThreadPool::global().parallel_for(slice, kGrainElements / p.splits + 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      C best = partial_best[(size_t)i];
      int64_t index = partial_index[(size_t)i];
      for (int64_t sp = 1; sp < p.splits; ++sp) {  // ranges in row order: a later range must be strictly better
        const size_t at = (size_t)(sp * slice + i);
        if (better<kMax>(partial_best[at], best)) best = partial_best[at], index = partial_index[at];
      }
      out[i] = finish(i / s.inner, i % s.inner, index);
    }
  });
}

template <class T, bool kMax, bool kArg>
void extreme(const T* x, const AxisSplit& s, Tensor& out) {
  using O = std::conditional_t<kArg, int64_t, T>;
  O* dst = static_cast<O*>(out.data());
  if (s.inner == 1) extreme_last_axis<T, kMax, kArg>(x, s.outer, s.n, dst);
  else extreme_inner_axis<T, kMax, kArg>(x, s, dst);
}

// ---- argsort ----

// Orders (key, index) pairs: NaN above every number, ties by original index (a total order, so std::sort gives
// the stable result).
template <class C, bool kAscending>
struct ArgsortLess {
  bool operator()(const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) const {
    const bool na = is_nan(a.first), nb = is_nan(b.first);
    if (na || nb) {
      if (na != nb) return kAscending ? nb : na;
      return a.second < b.second;
    }
    if (a.first != b.first) return kAscending ? a.first < b.first : a.first > b.first;
    return a.second < b.second;
  }
};

template <class T, bool kAscending>
void argsort_rows(const T* x, int64_t rows, int64_t n, int64_t* out) {
  using C = compute_t<T>;
  ThreadPool::global().parallel_for(rows, grain_rows(n * 8), [&](int64_t begin, int64_t end) {
    std::vector<std::pair<C, int64_t>> keyed((size_t)n);
    for (int64_t r = begin; r < end; ++r) {
      const T* p = x + r * n;
      for (int64_t i = 0; i < n; ++i) keyed[(size_t)i] = {load(p[i]), i};
      std::sort(keyed.begin(), keyed.end(), ArgsortLess<C, kAscending>{});
      int64_t* dst = out + r * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = keyed[(size_t)i].second;
    }
  });
}

}  // namespace

void CpuKernels::reduce(ReduceOp op, const Tensor& x, int axis, Tensor& out) {
  RBEE_ASSERT(dense(x) && dense(out), "reduce expects contiguous tensors");
  RBEE_ASSERT(axis >= 0 && axis < x.rank(), "reduce axis {} for rank {}", axis, x.rank());
  const AxisSplit s = split_at(x.shape(), axis);
  if (out.numel() == 0) return;
  RBEE_ASSERT(s.n > 0 || op == ReduceOp::Sum, "{} over an empty axis", reduce_op_name(op));
  visit_plain_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data());
    switch (op) {
      case ReduceOp::Sum: {
        T* dst = static_cast<T*>(out.data());
        if (s.inner == 1) sum_last_axis(src, s.outer, s.n, dst);
        else sum_inner_axis(src, s, dst);
        return;
      }
      case ReduceOp::Min: return extreme<T, false, false>(src, s, out);
      case ReduceOp::Max: return extreme<T, true, false>(src, s, out);
      case ReduceOp::ArgMin: return extreme<T, false, true>(src, s, out);
      case ReduceOp::ArgMax: return extreme<T, true, true>(src, s, out);
    }
  });
}

void CpuKernels::softmax(const Tensor& x, Tensor& out) {
  RBEE_ASSERT(dense(x) && dense(out) && x.rank() >= 1, "softmax expects contiguous tensors");
  const int64_t n = x.dim(-1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data());
    T* dst = static_cast<T*>(out.data());
    ThreadPool::global().parallel_for(rows, grain_rows(n), [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        softmax_rows(src + begin * n, dst + begin * n, end - begin, n);
      } else {
        // 16-bit floats: widen one row to f32, run the f32 kernel in place, round once on the way back.
        std::vector<float> row((size_t)n);
        for (int64_t r = begin; r < end; ++r) {
          for (int64_t i = 0; i < n; ++i) row[(size_t)i] = src[r * n + i].to_float();
          softmax_rows(row.data(), row.data(), 1, n);
          for (int64_t i = 0; i < n; ++i) dst[r * n + i] = T(row[(size_t)i]);
        }
      }
    });
  });
}

void CpuKernels::argsort(const Tensor& x, bool ascending, Tensor& out) {
  RBEE_ASSERT(dense(x) && dense(out) && x.rank() >= 1, "argsort expects contiguous tensors");
  const int64_t n = x.dim(-1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  int64_t* dst = static_cast<int64_t*>(out.data());
  visit_plain_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data());
    if (ascending) argsort_rows<T, true>(src, rows, n, dst);
    else argsort_rows<T, false>(src, rows, n, dst);
  });
}

}  // namespace rbee::cpu
