// GPU indexing ops: index_select, gather, index_add, scatter, scatter_add (ids I64, I32 or U32).
//
// Same semantics as the CPU (cpu_index.cpp):
// - An id outside [0, size of the axis) throws InvalidArgument naming the first bad id in row-major order of
//   ids and its position. Kernels skip bad ids and record the smallest bad position in an 8-byte flag with an
//   atomic min; the host reads the flag back after the launch (one small synchronous copy per call) and
//   throws. The output of a failed call is never returned (the front-end drops it), so skipped writes do not
//   show.
// - Results are deterministic. Every destination element is owned by one thread, which walks the ids that
//   reach it in row-major order: duplicates accumulate in ids order (index_add, scatter_add; integers wrap,
//   16-bit floats add in f32 and round after each add, like the CPU) and for scatter the last write wins.
#include <string>
#include <vector>

#include "backends/common/axis_split.h"
#include "backends/common/index_ops.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"

namespace rbee::gpu {

namespace {

using axis::AxisSplit;
using axis::split_at;
using index_ops::position_string;
using index_ops::visit_element_bits;

constexpr int kThreads = 256;
constexpr unsigned long long kNoBadId = ~0ull;

// ---- ids ----

template <class I>
__device__ inline bool id_ok(const I* ids, int64_t p, int64_t limit, unsigned long long* flag, int64_t* id) {
  const int64_t v = (int64_t)ids[p];
  if (v < 0 || v >= limit) {
    atomic_min_u64(flag, (unsigned long long)p);
    return false;
  }
  *id = v;
  return true;
}

// Checks every id (for calls whose op kernel would not visit them all: nothing to copy).
template <class I>
__global__ void check_ids_kernel(const I* ids, int64_t count, int64_t limit, unsigned long long* flag) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < count; p += (int64_t)gridDim.x * blockDim.x) {
    int64_t id;
    id_ok(ids, p, limit, flag, &id);
  }
}

template <class F>
void visit_id_type(DType t, F&& f) {
  switch (t) {
    case DType::I64: return f(int64_t{});
    case DType::I32: return f(int32_t{});
    case DType::U32: return f(uint32_t{});
    default: RBEE_THROW(ErrorCode::InvalidArgument, "ids must be i64, i32 or u32, got {}", dtype_name(t));
  }
}


// The device flag of one call and the error it reports.
class BadIdFlag {
 public:
  explicit BadIdFlag(GpuDevice& dev) : dev_(dev), flag_(Tensor::empty({1}, DType::I64, dev)) {
    RBEE_GPU_CHECK(memset_async(flag_.data(), 0xff, sizeof(unsigned long long), dev.stream()));
  }
  unsigned long long* data() const { return static_cast<unsigned long long*>(flag_.data()); }

  // Waits for the kernels, then throws InvalidArgument (as the CPU words it) if one saw a bad id.
  void check(const char* op, const Tensor& ids, int axis, int64_t limit) const {
    unsigned long long pos = kNoBadId;
    dev_.copy_to_host(&pos, flag_.data(), sizeof(pos));
    if (pos == kNoBadId) return;
    int64_t id = 0;
    const auto* at = static_cast<const char*>(ids.data()) + pos * (unsigned long long)dtype_type_size(ids.dtype());
    visit_id_type(ids.dtype(), [&](auto tag) {
      using I = decltype(tag);
      I v{};
      dev_.copy_to_host(&v, at, sizeof(I));
      id = (int64_t)v;
    });
    RBEE_THROW(ErrorCode::InvalidArgument, "{}: id {} at position {} of ids is out of range for axis {} of size {}",
               op, id, position_string(ids.shape(), (int64_t)pos), axis, limit);
  }

  // Launches the standalone id check (when the op's kernel visits no id).
  template <class I>
  void check_all(const I* ids, int64_t count, int64_t limit) const {
    if (count == 0) return;
    check_ids_kernel<I><<<grid_for(count, kThreads), kThreads, 0, dev_.stream()>>>(ids, count, limit, data());
    RBEE_GPU_CHECK_LAUNCH();
  }

 private:
  GpuDevice& dev_;
  Tensor flag_;
};

// ---- element arithmetic ----

// a + b in T: floats compute in compute_t<T> and round once, integers wrap around (index_ops.h).
template <class T>
__device__ inline void add_into(T* dst, const T& v) {
  if constexpr (std::is_integral_v<T>) *dst = index_ops::wrapping_add(*dst, v);
  else store(dst, load(dst) + load(&v));
}

// ---- index_select ----

// x [outer, n, inner units] -> out [outer, m, inner units]; a unit is U bytes of a row (16 when alignment allows).
template <class U, class I>
__global__ void index_select_kernel(const U* x, const I* ids, int64_t outer, int64_t n, int64_t m, int64_t units,
                                    U* out, unsigned long long* flag) {
  const int64_t total = outer * m * units;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t u = e % units, i = e / units % m, o = e / (units * m);
    int64_t id;
    if (id_ok(ids, i, n, flag, &id)) out[e] = x[(o * n + id) * units + u];
  }
}

// The widest copy unit (16, 8, 4, 2 or 1 bytes) that divides the row and keeps both base addresses aligned.
int copy_unit(int64_t row_bytes, const void* a, const void* b) {
  for (int unit : {16, 8, 4, 2}) {
    if (row_bytes % unit == 0 && (uintptr_t)a % unit == 0 && (uintptr_t)b % unit == 0) return unit;
  }
  return 1;
}

template <class F>
void visit_unit(int unit, F&& f) {
  switch (unit) {
    case 16: return f(uint4{});
    case 8: return f(uint64_t{});
    case 4: return f(uint32_t{});
    case 2: return f(uint16_t{});
    default: return f(uint8_t{});
  }
}

// ---- gather ----

// out [ids shape] (p over it) = x[coords of p, with the axis coordinate replaced by ids[p]]. xl: ids' shape with
// x's strides and a 0 stride on the axis.
template <class B, class I>
__global__ void gather_kernel(const B* x, Layout xl, int64_t axis_stride, const I* ids, int64_t count, int64_t limit,
                              B* out, unsigned long long* flag) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < count; p += (int64_t)gridDim.x * blockDim.x) {
    int64_t id;
    if (id_ok(ids, p, limit, flag, &id)) out[p] = x[strided_offset(xl, p) + id * axis_stride];
  }
}

// ---- index_add ----

// out [outer, n, inner] += src [outer, m, inner] at rows ids[i]: one thread per (outer, inner) column, adding
// the m source rows in ids order.
template <class T, class I>
__global__ void index_add_kernel(const I* ids, const T* src, int64_t outer, int64_t n, int64_t m, int64_t inner,
                                 T* out, unsigned long long* flag) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = t / inner, c = t % inner;
    for (int64_t i = 0; i < m; ++i) {
      int64_t id;
      if (id_ok(ids, i, n, flag, &id)) add_into(out + (o * n + id) * inner + c, src[(o * m + i) * inner + c]);
    }
  }
}

// ---- scatter / scatter_add ----

// ids, src [ids shape] seen as [outer, m, inner] around the axis; out (x's shape). One thread per (o, k) walks
// j = 0..m-1 in order, writing out[coords of p with the axis coordinate = ids[p]]. ol: ids' shape with out's
// strides and a 0 stride on the axis.
template <bool kAdd, class T, class I>
__global__ void scatter_kernel(const I* ids, const T* src, int64_t outer, int64_t m, int64_t inner, int64_t limit,
                               Layout ol, int64_t axis_stride, T* out, unsigned long long* flag) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = t / inner, k = t % inner;
    const int64_t p0 = o * m * inner + k;
    const int64_t base = strided_offset(ol, p0);  // the axis coordinate of p0 adds nothing (stride 0)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t p = p0 + j * inner;
      int64_t id;
      if (!id_ok(ids, p, limit, flag, &id)) continue;
      T* target = out + base + id * axis_stride;
      if constexpr (kAdd) add_into(target, src[p]);
      else *target = src[p];
    }
  }
}

// `shape` with `strides` (a contiguous tensor's) and a 0 stride on `axis`.
Layout layout_with_zero_axis(const Shape& shape, const Strides& strides, int axis) {
  Layout l{};
  l.rank = shape.rank();
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = shape[d];
    l.strides[d] = d == axis ? 0 : strides[d];
  }
  return l;
}

template <bool kAdd>
void scatter_impl(GpuDevice& dev, const char* op, const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  dev.activate();
  const AxisSplit s = split_at(ids.shape(), axis);
  const int64_t limit = out.dim(axis);
  BadIdFlag flag(dev);
  const Layout ol = layout_with_zero_axis(ids.shape(), out.strides(), axis);
  visit_id_type(ids.dtype(), [&](auto id_tag) {
    using I = decltype(id_tag);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const int64_t columns = s.outer * s.inner;
      if (columns == 0) return;
      scatter_kernel<kAdd, T, I><<<grid_for(columns, kThreads), kThreads, 0, dev.stream()>>>(
          static_cast<const I*>(ids.data()), static_cast<const T*>(src.data()), s.outer, s.n, s.inner, limit, ol,
          out.stride(axis), static_cast<T*>(out.data()), flag.data());
      RBEE_GPU_CHECK_LAUNCH();
    };
    if constexpr (kAdd) visit_plain_storage(out.dtype(), run);
    else visit_element_bits(out.dtype(), run);
  });
  flag.check(op, ids, axis, limit);
}

}  // namespace

void GpuKernels::index_select(const Tensor& x, const Tensor& ids, int axis, Tensor& out) {
  device_.activate();
  const AxisSplit s = split_at(x.shape(), axis);
  const int64_t m = ids.numel(), n = x.dim(axis);
  const int64_t row_bytes = s.inner * dtype_type_size(x.dtype());
  BadIdFlag flag(device_);
  visit_id_type(ids.dtype(), [&](auto id_tag) {
    using I = decltype(id_tag);
    const I* pids = static_cast<const I*>(ids.data());
    if (s.outer * row_bytes == 0) return flag.check_all(pids, m, n);  // nothing to copy: check the ids alone
    if (m == 0) return;
    const int unit = copy_unit(row_bytes, x.data(), out.data());
    visit_unit(unit, [&](auto unit_tag) {
      using U = decltype(unit_tag);
      const int64_t units = row_bytes / unit;
      index_select_kernel<U, I><<<grid_for(s.outer * m * units, kThreads), kThreads, 0, device_.stream()>>>(
          static_cast<const U*>(x.data()), pids, s.outer, n, m, units, static_cast<U*>(out.data()), flag.data());
      RBEE_GPU_CHECK_LAUNCH();
    });
  });
  flag.check("index_select", ids, axis, n);
}

void GpuKernels::gather(const Tensor& x, const Tensor& ids, int axis, Tensor& out) {
  device_.activate();
  const int64_t count = ids.numel(), limit = x.dim(axis);
  if (count == 0) return;
  BadIdFlag flag(device_);
  const Layout xl = layout_with_zero_axis(ids.shape(), x.strides(), axis);
  visit_id_type(ids.dtype(), [&](auto id_tag) {
    using I = decltype(id_tag);
    visit_element_bits(x.dtype(), [&](auto tag) {
      using B = decltype(tag);
      gather_kernel<B, I><<<grid_for(count, kThreads), kThreads, 0, device_.stream()>>>(
          static_cast<const B*>(x.data()), xl, x.stride(axis), static_cast<const I*>(ids.data()), count, limit,
          static_cast<B*>(out.data()), flag.data());
      RBEE_GPU_CHECK_LAUNCH();
    });
  });
  flag.check("gather", ids, axis, limit);
}

void GpuKernels::index_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  device_.activate();
  const AxisSplit s = split_at(out.shape(), axis);
  const int64_t m = ids.numel(), n = out.dim(axis);
  BadIdFlag flag(device_);
  visit_id_type(ids.dtype(), [&](auto id_tag) {
    using I = decltype(id_tag);
    const I* pids = static_cast<const I*>(ids.data());
    if (s.outer * s.inner == 0) return flag.check_all(pids, m, n);
    if (m == 0) return;
    visit_plain_storage(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      index_add_kernel<T, I><<<grid_for(s.outer * s.inner, kThreads), kThreads, 0, device_.stream()>>>(
          pids, static_cast<const T*>(src.data()), s.outer, n, m, s.inner, static_cast<T*>(out.data()), flag.data());
      RBEE_GPU_CHECK_LAUNCH();
    });
  });
  flag.check("index_add", ids, axis, n);
}

void GpuKernels::scatter(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  scatter_impl<false>(device_, "scatter", ids, src, axis, out);
}

void GpuKernels::scatter_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) {
  scatter_impl<true>(device_, "scatter_add", ids, src, axis, out);
}

}  // namespace rbee::gpu
