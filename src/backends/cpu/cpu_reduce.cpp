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
// Elements of the kept inner dimensions processed together when reducing a non-last axis.
constexpr int64_t kInnerChunk = 512;

// x seen as [outer, n, inner] around the reduced axis (out as [outer, inner]).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, int axis) {
  AxisSplit s;
  for (int d = 0; d < axis; ++d) s.outer *= shape[d];
  s.n = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) s.inner *= shape[d];
  return s;
}

int64_t grain_rows(int64_t row_elements) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(row_elements, 1)); }

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
  const int64_t chunks = (s.inner + kInnerChunk - 1) / kInnerChunk;
  const int64_t task_elements = s.n * std::min(s.inner, kInnerChunk);
  ThreadPool::global().parallel_for(s.outer * chunks, grain_rows(task_elements), [&](int64_t begin, int64_t end) {
    Acc acc[kInnerChunk];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks, c0 = (t % chunks) * kInnerChunk, len = std::min(kInnerChunk, s.inner - c0);
      std::fill(acc, acc + len, Acc(0));
      for (int64_t j = 0; j < s.n; ++j) {
        const T* p = x + (o * s.n + j) * s.inner + c0;
        for (int64_t c = 0; c < len; ++c) acc[c] += (Acc)load(p[c]);
      }
      T* dst = out + o * s.inner + c0;
      for (int64_t c = 0; c < len; ++c) {
        if constexpr (std::is_integral_v<T>) dst[c] = (T)acc[c];
        else dst[c] = store<T>((compute_t<T>)acc[c]);
      }
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
  const int64_t chunks = (s.inner + kInnerChunk - 1) / kInnerChunk;
  const int64_t task_elements = s.n * std::min(s.inner, kInnerChunk);
  ThreadPool::global().parallel_for(s.outer * chunks, grain_rows(task_elements), [&](int64_t begin, int64_t end) {
    compute_t<T> best[kInnerChunk];
    int64_t index[kInnerChunk];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks, c0 = (t % chunks) * kInnerChunk, len = std::min(kInnerChunk, s.inner - c0);
      const T* first = x + o * s.n * s.inner + c0;
      for (int64_t c = 0; c < len; ++c) best[c] = load(first[c]), index[c] = 0;
      for (int64_t j = 1; j < s.n; ++j) {
        const T* p = first + j * s.inner;
        for (int64_t c = 0; c < len; ++c) {
          const compute_t<T> v = load(p[c]);
          if (better<kMax>(v, best[c])) best[c] = v, index[c] = j;
        }
      }
      O* dst = out + o * s.inner + c0;
      for (int64_t c = 0; c < len; ++c) {
        if constexpr (kArg) dst[c] = index[c];
        else dst[c] = first[index[c] * s.inner + c];
      }
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
