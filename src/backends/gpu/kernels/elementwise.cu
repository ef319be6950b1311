// GPU elementwise ops: unary, binary, the map ops (affine, ...), cast, copy, fill, arange, where. Grid-stride loops over the
// output's row-major index; inputs are read through their strides (broadcasts have stride 0). Before a launch the
// operands' layouts are collapsed (size-1 dims dropped, neighbouring dims merged where every operand's strides
// allow), so contiguous operands become one dim and a per-channel broadcast three; calls of fewer than 2^31
// elements do the remaining index math in 32 bits.
#include <initializer_list>
#include <limits>

#include "backends/common/scalar_ops.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"
#include "rbee/core/half.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

// Unary and binary ops and conversions: one definition with the CPU backend (backends/common/scalar_ops.h).
using scalar::unary_value;
using scalar::binary_value;
using scalar::convert_value;

// Element offset of row-major index i in layout l (as strided_offset), cheaper: one multiply for one dim, 32-bit
// divisions when the call's element count n (which bounds i and every dim) fits 31 bits.
__device__ inline int64_t elem_offset(const Layout& l, int64_t i, int64_t n) {
  if (l.rank == 1) return i * l.strides[0];
  if (n > 0x7fffffff) return strided_offset(l, i);
  uint32_t u = (uint32_t)i;
  int64_t off = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const uint32_t len = (uint32_t)l.shape[d];
    off += (int64_t)(u % len) * l.strides[d];
    u /= len;
  }
  return off;
}

// Offsets of index i in two layouts collapsed together (same rank and shape): the coordinates are computed once.
__device__ inline void elem_offsets(const Layout& a, const Layout& b, int64_t i, int64_t n, int64_t& oa,
                                    int64_t& ob) {
  if (a.rank == 1) {
    oa = i * a.strides[0];
    ob = i * b.strides[0];
    return;
  }
  if (n > 0x7fffffff) {
    oa = strided_offset(a, i);
    ob = strided_offset(b, i);
    return;
  }
  uint32_t u = (uint32_t)i;
  oa = 0;
  ob = 0;
  for (int d = a.rank - 1; d >= 0; --d) {
    const uint32_t len = (uint32_t)a.shape[d], q = u / len, c = u - q * len;
    oa += (int64_t)c * a.strides[d];
    ob += (int64_t)c * b.strides[d];
    u = q;
  }
}

// Collapses layouts of one shape (the call's index space) in place, keeping offset(i) of each: drops size-1 dims,
// then merges dim d into its left neighbour p when stride[p] == stride[d] * shape[d] for every layout.
void collapse(std::initializer_list<Layout*> layouts) {
  Layout* first = *layouts.begin();
  const int rank = first->rank;
  int m = 0;  // dims kept so far
  for (int d = 0; d < rank; ++d) {
    const int64_t len = first->shape[d];
    if (len == 1) continue;
    bool merge = m > 0;
    for (Layout* l : layouts) merge = merge && l->strides[m - 1] == l->strides[d] * len;
    for (Layout* l : layouts) {
      if (merge) {
        l->shape[m - 1] *= len;
        l->strides[m - 1] = l->strides[d];
      } else {
        l->shape[m] = len;
        l->strides[m] = l->strides[d];
      }
    }
    if (!merge) ++m;
  }
  for (Layout* l : layouts) l->rank = m;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, compute_t<T> param, const T* x, Layout xl, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    store(out + i, unary_value<compute_t<T>>(op, load(x + elem_offset(xl, i, n)), param));
  }
}

template <class T, class O>
__global__ void binary_kernel(BinaryOp op, const T* a, Layout al, const T* b, Layout bl, O* out, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t oa, ob;
    elem_offsets(al, bl, i, n, oa, ob);
    const C r = binary_value<C>(op, load(a + oa), load(b + ob));
    if constexpr (std::is_same_v<O, uint8_t> && !std::is_same_v<T, uint8_t>) out[i] = (uint8_t)(r != C(0));
    else store(out + i, (compute_t<O>)r);
  }
}

// A map op (op_table.def, RBEE_MAP_OP): out[i] = f(x[i]).
template <class T, class F>
__global__ void map_kernel(F f, const T* x, Layout xl, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    store(out + i, f(load(x + elem_offset(xl, i, n))));
  }
}

template <class I, class O>
__global__ void cast_kernel(const I* x, Layout xl, O* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const auto v = load(x + elem_offset(xl, i, n));
    if constexpr (std::is_same_v<O, f16_t> || std::is_same_v<O, bf16_t>) store(out + i, (float)v);
    else out[i] = convert_value<O>(v);
  }
}

template <class T>
__global__ void copy_kernel(const T* src, Layout sl, T* dst, Layout dl, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t od, os;
    elem_offsets(dl, sl, i, n, od, os);
    dst[od] = src[os];
  }
}

// Quantized rows: copies `row_bytes` bytes for each row (row offsets in bytes already computed).
__global__ void copy_rows_kernel(const char* src, Layout sl, char* dst, Layout dl, int64_t rows, int64_t row_bytes,
                                 int block_size, int type_size) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t so = strided_offset(sl, r) / block_size * type_size;
    const int64_t dof = strided_offset(dl, r) / block_size * type_size;
    for (int64_t j = threadIdx.x; j < row_bytes; j += blockDim.x) dst[dof + j] = src[so + j];
  }
}

template <class T>
__global__ void fill_kernel(T* dst, Layout dl, T value, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    dst[elem_offset(dl, i, n)] = value;
  }
}

template <class T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const double v = start + (double)i * step;
    if constexpr (std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>) store(out + i, (float)v);
    else out[i] = convert_value<T>(v);
  }
}

template <class T>
__global__ void where_kernel(const uint8_t* c, Layout cl, const T* a, Layout al, const T* b, Layout bl, T* out,
                             int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    out[i] = c[elem_offset(cl, i, n)] ? a[elem_offset(al, i, n)] : b[elem_offset(bl, i, n)];
  }
}

// Host value -> storage element (for fill).
template <class T>
T host_element(double v) {
  if constexpr (std::is_same_v<T, f16_t>) {
    T r;
    r.bits = f32_to_f16_bits((float)v);
    return r;
  } else if constexpr (std::is_same_v<T, bf16_t>) {
    T r;
    r.bits = float_to_bf16((float)v);
    return r;
  } else if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);
    if (v <= (double)std::numeric_limits<T>::min()) return std::numeric_limits<T>::min();
    if (v >= (double)std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
    return (T)v;
  } else {
    return (T)v;
  }
}

}  // namespace

void GpuKernels::unary(UnaryOp op, double param, const Tensor& x, Tensor& out) {
  device_.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_plain_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint32_t> || std::is_same_v<T, uint8_t>) {
      RBEE_THROW(ErrorCode::Unsupported, "unary {} is not defined for {}", unary_op_name(op), dtype_name(x.dtype()));
    } else {
      Layout xl = layout_of(x);
      collapse({&xl});
      unary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(
          op, (compute_t<T>)param, static_cast<const T*>(x.data()), xl, static_cast<T*>(out.data()), n);
      RBEE_GPU_CHECK_LAUNCH();
    }
  });
}

void GpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  device_.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_plain_storage(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Layout al = layout_of(a), bl = layout_of(b);
    collapse({&al, &bl});
    auto launch = [&](auto out_tag) {
      using O = decltype(out_tag);
      binary_kernel<T, O><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(
          op, static_cast<const T*>(a.data()), al, static_cast<const T*>(b.data()), bl, static_cast<O*>(out.data()),
          n);
    };
    if (is_comparison(op)) launch(uint8_t{});
    else launch(T{});
    RBEE_GPU_CHECK_LAUNCH();
  });
}

namespace {

// The map ops of the op table: f = Formula<compute_t<T>> built once on the host from the op's scalars.
template <template <class> class Formula, class... Scalars>
void map_values(GpuDevice& device, const Tensor& x, Tensor& out, Scalars... scalars) {
  device.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Formula<compute_t<T>> f(scalars...);
    Layout xl = layout_of(x);
    collapse({&xl});
    map_kernel<T, Formula<compute_t<T>>><<<grid_for(n, kThreads), kThreads, 0, device.stream()>>>(
        f, static_cast<const T*>(x.data()), xl, static_cast<T*>(out.data()), n);
    RBEE_GPU_CHECK_LAUNCH();
  });
}
}  // namespace

#define RBEE_OP(Kind, rule, backends, method, params)
#define RBEE_MAP_OP(Kind, method, Formula, scalars, args)                 \
  void GpuKernels::method RBEE_MAP_OP_PARAMS scalars {                     \
    map_values<scalar::Formula>(device_, x, out, RBEE_MAP_OP_ARGS args);  \
  }
#include "rbee/backend/op_table.def"

void GpuKernels::cast(const Tensor& x, Tensor& out) {
  device_.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_plain_storage(x.dtype(), [&](auto in_tag) {
    using I = decltype(in_tag);
    visit_plain_storage(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      Layout xl = layout_of(x);
      collapse({&xl});
      cast_kernel<I, O><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(
          static_cast<const I*>(x.data()), xl, static_cast<O*>(out.data()), n);
      RBEE_GPU_CHECK_LAUNCH();
    });
  });
}

void GpuKernels::copy(const Tensor& src, Tensor& dst) {
  device_.activate();
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    RBEE_GPU_CHECK(memcpy_async(dst.data(), src.data(), (size_t)src.nbytes(), device_.stream()));
    return;
  }
  if (is_quantized(src.dtype())) {
    // Rows of packed blocks: iterate the row index space (all dims but the last).
    Layout sl = layout_of(src), dl = layout_of(dst);
    sl.rank -= 1;
    dl.rank -= 1;
    const int64_t rows = n / src.dim(-1);
    copy_rows_kernel<<<grid_for(rows, 1), 128, 0, device_.stream()>>>(
        static_cast<const char*>(src.data()), sl, static_cast<char*>(dst.data()), dl, rows,
        dtype_row_bytes(src.dtype(), src.dim(-1)), dtype_block_size(src.dtype()), dtype_type_size(src.dtype()));
    RBEE_GPU_CHECK_LAUNCH();
    return;
  }
  visit_plain_storage(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Layout sl = layout_of(src), dl = layout_of(dst);
    collapse({&sl, &dl});
    // Contiguous last dims whose bytes, outer strides and bases are multiples of 16 (a concatenation along the last
    // axis, a column slice, a broadcast of whole rows): the same copy over 16-byte vectors, so each index
    // computation moves 16 / sizeof(T) elements.
    // RBEE_COPY_VEC16=0: element by element always (A/B).
    static const bool vec16 = env::flag_or("RBEE_COPY_VEC16", true);
    const int v = kVec16<T>, last = sl.rank - 1;
    if (vec16 && v > 1 && last >= 0 && sl.strides[last] == 1 && dl.strides[last] == 1) {
      bool ok = vec16_ok({src.data(), dst.data()}, {sl.shape[last]}, v);
      for (int d = 0; d < last; ++d) ok = ok && sl.strides[d] % v == 0 && dl.strides[d] % v == 0;
      if (ok) {
        Layout svec = sl, dvec = dl;
        svec.shape[last] /= v;
        dvec.shape[last] /= v;
        for (int d = 0; d < last; ++d) {
          svec.strides[d] /= v;
          dvec.strides[d] /= v;
        }
        const int64_t nvec = n / v;
        copy_kernel<Bytes16><<<grid_for(nvec, kThreads), kThreads, 0, device_.stream()>>>(
            static_cast<const Bytes16*>(src.data()), svec, static_cast<Bytes16*>(dst.data()), dvec, nvec);
        RBEE_GPU_CHECK_LAUNCH();
        return;
      }
    }
    copy_kernel<T><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(static_cast<const T*>(src.data()), sl,
                                                                             static_cast<T*>(dst.data()), dl, n);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

void GpuKernels::fill(Tensor& dst, double value) {
  device_.activate();
  const int64_t n = dst.numel();
  if (n == 0) return;
  visit_plain_storage(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Layout dl = layout_of(dst);
    collapse({&dl});
    fill_kernel<T><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(static_cast<T*>(dst.data()), dl,
                                                                             host_element<T>(value), n);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

void GpuKernels::arange(Tensor& out, double start, double step) {
  device_.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_plain_storage(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(static_cast<T*>(out.data()), start,
                                                                               step, n);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

void GpuKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  device_.activate();
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_plain_storage(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Layout cl = layout_of(cond), al = layout_of(a), bl = layout_of(b);
    collapse({&cl, &al, &bl});
    where_kernel<T><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(
        static_cast<const uint8_t*>(cond.data()), cl, static_cast<const T*>(a.data()), al,
        static_cast<const T*>(b.data()), bl, static_cast<T*>(out.data()), n);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
