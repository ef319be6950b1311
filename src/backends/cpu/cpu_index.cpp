// CPU indexing ops: index_select, gather, index_add, scatter, scatter_add.
//
// Every kernel first checks all ids against the size of the indexed axis and throws InvalidArgument naming the
// first bad id and its position in ids, so nothing is written when an id is bad. Work is split only across
// coordinates that never write the same output element, and each task walks ids in row-major order: results are
// deterministic, duplicates accumulate in ids order, and for scatter the last write in row-major order wins.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/common/axis_split.h"
#include "backends/common/index_ops.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

using index_ops::position_string;
using index_ops::visit_element_bits;

// Row-major without gaps. Empty tensors count as dense whatever their strides (Tensor::is_contiguous() can
// answer false for them).
bool dense(const Tensor& t) { return t.numel() == 0 || t.is_contiguous(); }

// Tasks are handed to the thread pool in chunks of at least this many elements.
constexpr int64_t kGrainElements = 1 << 15;
// Inner (after-axis) coordinates processed by one gather/scatter task.
constexpr int64_t kInnerChunk = 1024;

int64_t grain_for(int64_t task_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(task_elements, 1));
}


// ids (contiguous, I64/I32/U32) as int64, after checking each lies in [0, limit).
std::vector<int64_t> checked_ids(const char* op, const Tensor& ids, int axis, int64_t limit) {
  RBEE_ASSERT(dense(ids), "{}: ids must be contiguous", op);
  std::vector<int64_t> out((size_t)ids.numel());
  visit_index_dtype(ids.dtype(), [&](auto tag) {
    using I = decltype(tag);
    const I* p = static_cast<const I*>(ids.data());
    for (size_t k = 0; k < out.size(); ++k) {
      const int64_t id = (int64_t)p[k];
      RBEE_CHECK(id >= 0 && id < limit, "{}: id {} at position {} of ids is out of range for axis {} of size {}", op,
                 id, position_string(ids.shape(), (int64_t)k), axis, limit);
      out[k] = id;
    }
  });
  return out;
}

// a + b in T: floats compute in compute_t<T> and round once, integers wrap around (index_ops.h).
template <class T>
inline T add_elements(T a, T b) {
  if constexpr (std::is_integral_v<T>) return index_ops::wrapping_add(a, b);
  else return store<T>(load(a) + load(b));
}

// Coordinates of a tensor of `shape` split around `axis`: offsets (through `strides`) of every before-axis
// coordinate (outer) and after-axis coordinate (inner), each listed in row-major order.
struct SplitOffsets {
  std::vector<int64_t> outer, inner;
};
SplitOffsets split_offsets(const Shape& shape, const Strides& strides, int axis) {
  auto offsets = [&](int begin, int end) {
    int64_t count = 1;
    for (int d = begin; d < end; ++d) count *= shape[d];
    std::vector<int64_t> offs((size_t)count);
    for (int64_t f = 0; f < count; ++f) {
      int64_t rem = f, off = 0;
      for (int d = end - 1; d >= begin; --d) {
        off += rem % shape[d] * strides[d];
        rem /= shape[d];
      }
      offs[(size_t)f] = off;
    }
    return offs;
  };
  return {offsets(0, axis), offsets(axis + 1, shape.rank())};
}

// Walks ids (contiguous, shape `shape`) split at `axis` as [outer, m, inner]: fn(p, outer_index, k) for ids flat
// position p = (o * m + j) * inner + k. Tasks are (outer, chunk of inner); within a task j and then k ascend, so
// any two positions that differ only along `axis` run in row-major order on one thread.
template <class Fn>
void for_each_id(const Shape& shape, int axis, Fn&& fn) {
  const axis::AxisSplit split = axis::split_at(shape, axis);
  const int64_t outer = split.outer, m = split.n, inner = split.inner;
  if (outer * m * inner == 0) return;
  const int64_t chunks = (inner + kInnerChunk - 1) / kInnerChunk;
  const int64_t task_elements = m * std::min(inner, kInnerChunk);
  ThreadPool::global().parallel_for(outer * chunks, grain_for(task_elements), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks, k0 = (t % chunks) * kInnerChunk, k1 = std::min(inner, k0 + kInnerChunk);
      for (int64_t j = 0; j < m; ++j) {
        for (int64_t k = k0; k < k1; ++k) fn((o * m + j) * inner + k, o, k);
      }
    }
  });
}

}  // namespace

void CpuKernels::index_select(const Tensor& x, const Tensor& ids, int axis, Tensor& out) {
  RBEE_ASSERT(dense(x) && dense(out), "index_select expects contiguous tensors");
  const std::vector<int64_t> id = checked_ids("index_select", ids, axis, x.dim(axis));
  const axis::AxisSplit split = axis::split_at(x.shape(), axis);
  const int64_t outer = split.outer, n = split.n, inner = split.inner;
  const int64_t m = (int64_t)id.size();
  if (outer * m * inner == 0) return;
  const size_t row_bytes = (size_t)(inner * dtype_type_size(x.dtype()));
  const char* src = static_cast<const char*>(x.data());
  char* dst = static_cast<char*>(out.data());
  // One task per output row [o, i, :], a copy of input row [o, id[i], :].
  ThreadPool::global().parallel_for(outer * m, grain_for(inner), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / m, i = t % m;
      std::memcpy(dst + (size_t)t * row_bytes, src + (size_t)(o * n + id[(size_t)i]) * row_bytes, row_bytes);
    }
  });
}

void CpuKernels::gather(const Tensor& x, const Tensor& ids, int axis, Tensor& out) {
  RBEE_ASSERT(dense(x) && dense(out) && out.shape() == ids.shape(),
              "gather expects contiguous x and out of ids' shape");
  const std::vector<int64_t> id = checked_ids("gather", ids, axis, x.dim(axis));
  const SplitOffsets xo = split_offsets(ids.shape(), x.strides(), axis);
  const int64_t axis_stride = x.stride(axis);
  visit_element_bits(x.dtype(), [&](auto tag) {
    using B = decltype(tag);
    const B* src = static_cast<const B*>(x.data());
    B* dst = static_cast<B*>(out.data());
    for_each_id(ids.shape(), axis, [&](int64_t p, int64_t o, int64_t k) {
      dst[p] = src[xo.outer[(size_t)o] + id[(size_t)p] * axis_stride + xo.inner[(size_t)k]];
    });
  });
}

void CpuKernels::index_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  RBEE_ASSERT(dense(src) && dense(out), "index_add expects contiguous src and out");
  const std::vector<int64_t> id = checked_ids("index_add", ids, axis, out.dim(axis));
  const axis::AxisSplit split = axis::split_at(out.shape(), axis);
  const int64_t outer = split.outer, n = split.n, inner = split.inner;
  const int64_t m = (int64_t)id.size();
  if (outer * m * inner == 0) return;
  visit_plain_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src.data());
    T* d = static_cast<T*>(out.data());
    // Tasks are (outer, chunk of inner); each adds the m source rows in ids order, so repeats accumulate in order.
    const int64_t chunks = (inner + kInnerChunk - 1) / kInnerChunk;
    ThreadPool::global().parallel_for(
        outer * chunks, grain_for(m * std::min(inner, kInnerChunk)), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t o = t / chunks, c0 = (t % chunks) * kInnerChunk, len = std::min(kInnerChunk, inner - c0);
            for (int64_t i = 0; i < m; ++i) {
              const T* from = s + (o * m + i) * inner + c0;
              T* to = d + (o * n + id[(size_t)i]) * inner + c0;
              for (int64_t c = 0; c < len; ++c) to[c] = add_elements(to[c], from[c]);
            }
          }
        });
  });
}

namespace {

// scatter (kAdd false) and scatter_add (kAdd true): out[.., ids[p], ..] (=|+=) src[p] with p's other coordinates.
template <bool kAdd>
void scatter_impl(const char* op, const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  RBEE_ASSERT(dense(ids) && dense(src) && dense(out) && src.shape() == ids.shape(),
              "{} expects contiguous ids, src (ids' shape) and out", op);
  const std::vector<int64_t> id = checked_ids(op, ids, axis, out.dim(axis));
  const SplitOffsets oo = split_offsets(ids.shape(), out.strides(), axis);
  const int64_t axis_stride = out.stride(axis);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src.data());
    T* d = static_cast<T*>(out.data());
    for_each_id(ids.shape(), axis, [&](int64_t p, int64_t o, int64_t k) {
      T& target = d[oo.outer[(size_t)o] + id[(size_t)p] * axis_stride + oo.inner[(size_t)k]];
      if constexpr (kAdd) target = add_elements(target, s[p]);
      else target = s[p];
    });
  };
  if constexpr (kAdd) visit_plain_dtype(out.dtype(), run);
  else visit_element_bits(out.dtype(), run);
}

}  // namespace

void CpuKernels::scatter(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  scatter_impl<false>("scatter", ids, src, axis, out);
}

void CpuKernels::scatter_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  scatter_impl<true>("scatter_add", ids, src, axis, out);
}

}  // namespace rbee::cpu
