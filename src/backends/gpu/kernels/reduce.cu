// GPU reductions (sum, min, max, argmin, argmax over one axis of a contiguous tensor) and softmax over the last
// axis. Argsort is in sort.cu. The conventions are the CPU's (src/backends/cpu/cpu_reduce.cpp):
// - Float sums (f16, bf16, f32, f64) accumulate in double and round once; integer sums accumulate in uint64 and
//   keep the dtype's low bits (two's-complement wraparound).
// - Min/Max/ArgMin/ArgMax: a NaN wins (the first NaN of the slice); otherwise ties keep the first index.
//   Min/Max write the winning element of x bit for bit.
// - Softmax: max-subtracted, computed in f32 (f64 for f64) and rounded once; a row holding a NaN or +inf, or
//   only -inf, becomes all NaN.
//
// Threads split a slice's elements round robin; each keeps the best of its own elements, and partial results
// merge under the total order "NaN first, then the better value, then the lower index", which gives exactly
// the sequential scan's answer whatever the split.
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backends/common/axis_split.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
// Columns and row lanes of one block of the non-last-axis kernel (kColumns * kRowLanes = kThreads).
constexpr int kColumns = 32, kRowLanes = kThreads / kColumns;

// ---- the reduction operations: init, add one element, combine two partials, write the result ----

template <class T>
struct SumOp {
  static constexpr bool kExact = false;  // the double sum depends on the order: never split a row over blocks
  using Acc = std::conditional_t<std::is_integral_v<T>, unsigned long long, double>;
  using Out = T;
  __device__ static Acc init() { return Acc(0); }
  __device__ static void add(Acc& a, const T& v, int64_t) {
    if constexpr (std::is_integral_v<T>) a += (Acc)(long long)v;  // sign-extends, then wraps modulo 2^64
    else a += (double)load(&v);
  }
  __device__ static Acc combine(const Acc& a, const Acc& b) { return a + b; }
  __device__ static void write(Out* dst, const Acc& a, const T*, int64_t) {
    if constexpr (std::is_integral_v<T>) *dst = (T)a;
    else store(dst, (compute_t<T>)a);
  }
};

// Whether v replaces best in a Min (kMax false) or Max scan: a NaN replaces a number, nothing replaces a NaN.
template <bool kMax, class C>
__device__ inline bool better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (best != best) return false;
    if (v != v) return true;
  }
  return kMax ? v > best : v < best;
}

template <class T, bool kMax, bool kArg>
struct ExtremeOp {
  static constexpr bool kExact = true;  // the same answer for any split of a row (see the top of the file)
  using C = compute_t<T>;
  struct Acc {
    C v;
    int64_t i;  // -1: no element seen
  };
  using Out = std::conditional_t<kArg, int64_t, T>;
  __device__ static Acc init() { return {C(0), -1}; }
  __device__ static void add(Acc& a, const T& raw, int64_t j) {
    const C v = load(&raw);
    if (a.i < 0 || better<kMax>(v, a.v)) a = {v, j};
  }
  __device__ static Acc combine(const Acc& a, const Acc& b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const Acc& first = a.i < b.i ? a : b;
    const Acc& second = a.i < b.i ? b : a;
    return better<kMax>(second.v, first.v) ? second : first;
  }
  // slice: element 0 of the reduced slice; stride: element stride along it.
  __device__ static void write(Out* dst, const Acc& a, const T* slice, int64_t stride) {
    if constexpr (kArg) *dst = a.i;
    else *dst = slice[a.i * stride];  // the element itself, bit for bit
  }
};

template <class Op>
struct Combine {
  __device__ typename Op::Acc operator()(const typename Op::Acc& a, const typename Op::Acc& b) const {
    return Op::combine(a, b);
  }
};

// x [rows, n] -> out [rows]: groups of `group` threads per row, blockDim.x / group rows per block.
template <class T, class Op>
__global__ void reduce_rows_kernel(const T* x, int64_t rows, int64_t n, int group, typename Op::Out* out) {
  using Acc = typename Op::Acc;
  Acc* scratch = dynamic_smem<Acc>();
  const int lane = threadIdx.x & (group - 1), slot = threadIdx.x / group, per_block = blockDim.x / group;
  // The loop bound is the same for the whole block: every thread reaches group_reduce's barriers.
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + slot;
    Acc a = Op::init();
    if (r < rows) {
      const T* row = x + r * n;
      for (int64_t j = lane; j < n; j += group) Op::add(a, row[j], j);
    }
    a = group_reduce(a, Combine<Op>{}, scratch, group);
    if (r < rows && lane == 0) Op::write(out + r, a, x + r * n, 1);
  }
}

// x [outer, n, inner] -> out [outer, inner]: a block covers kColumns columns of one outer index; its kRowLanes
// lanes per column take every kRowLanes-th reduced row, and the lanes merge through shared memory.
template <class T, class Op>
__global__ void reduce_columns_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, typename Op::Out* out) {
  using Acc = typename Op::Acc;
  Acc* scratch = dynamic_smem<Acc>();
  const int cx = threadIdx.x % kColumns, ry = threadIdx.x / kColumns;
  const int64_t tiles_per_outer = ceil_div(inner, kColumns);
  for (int64_t t = blockIdx.x; t < outer * tiles_per_outer; t += gridDim.x) {
    const int64_t o = t / tiles_per_outer, c = (t % tiles_per_outer) * kColumns + cx;
    const T* slice = x + o * n * inner + c;
    Acc a = Op::init();
    if (c < inner) {
      for (int64_t j = ry; j < n; j += kRowLanes) Op::add(a, slice[j * inner], j);
    }
    scratch[threadIdx.x] = a;
    __syncthreads();
    for (int s = kRowLanes / 2; s > 0; s >>= 1) {
      if (ry < s) scratch[threadIdx.x] = Op::combine(scratch[threadIdx.x], scratch[threadIdx.x + s * kColumns]);
      __syncthreads();
    }
    if (ry == 0 && c < inner) Op::write(out + o * inner + c, scratch[cx], slice, inner);
    __syncthreads();
  }
}

// Few long rows (e.g. the argmax of one row of 128256 logits: one block of the kernel above scanned it in 0.2 ms):
// x [rows, n] -> partial [rows, splits], block (s, r) reducing elements [s * chunk, (s + 1) * chunk) of row r.
template <class T, class Op>
__global__ void reduce_row_chunks_kernel(const T* x, int64_t n, int64_t chunk, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  Acc* scratch = dynamic_smem<Acc>();
  const int64_t r = blockIdx.y, begin = (int64_t)blockIdx.x * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  const T* row = x + r * n;
  Acc a = Op::init();
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) Op::add(a, row[j], j);
  a = group_reduce(a, Combine<Op>{}, scratch, (int)blockDim.x);
  if (threadIdx.x == 0) partial[r * gridDim.x + blockIdx.x] = a;
}

// partial [rows, splits] -> out [rows]: one block per row combines its partials.
template <class T, class Op>
__global__ void reduce_row_partials_kernel(const typename Op::Acc* partial, int splits, const T* x, int64_t n,
                                           typename Op::Out* out) {
  using Acc = typename Op::Acc;
  Acc* scratch = dynamic_smem<Acc>();
  const int64_t r = blockIdx.x;
  Acc a = Op::init();
  for (int s = threadIdx.x; s < splits; s += blockDim.x) a = Op::combine(a, partial[r * splits + s]);
  a = group_reduce(a, Combine<Op>{}, scratch, (int)blockDim.x);
  if (threadIdx.x == 0) Op::write(out + r, a, x + r * n, 1);
}

// Rows split over blocks: exact operations only, rows at least kSplitMinRow long, and few enough rows that one
// block per row would leave most multiprocessors idle.
constexpr int64_t kSplitChunk = 2048;  // elements per block (8 per thread)
constexpr int64_t kSplitMinRow = 4 * kSplitChunk;
// RBEE_REDUCE_SPLIT=0: one block per row always (the kernel of before; A/B measurements).
bool split_rows_enabled() {
  static const bool on = env::flag_or("RBEE_REDUCE_SPLIT", true);
  return on;
}

template <class T, class Op>
void launch_reduce(GpuDevice& dev, const T* x, int64_t outer, int64_t n, int64_t inner, void* out) {
  using Acc = typename Op::Acc;
  auto* dst = static_cast<typename Op::Out*>(out);
  const size_t smem = kThreads * sizeof(Acc);
  if (Op::kExact && inner == 1 && n >= kSplitMinRow && outer <= dev.props().multiprocessors && outer <= 65535 &&
      split_rows_enabled()) {
    const int64_t splits = ceil_div(n, kSplitChunk);
    Tensor partial = Tensor::empty({outer * splits * (int64_t)sizeof(Acc)}, DType::U8, dev);
    auto* part = static_cast<Acc*>(partial.data());
    reduce_row_chunks_kernel<T, Op><<<dim3((unsigned)splits, (unsigned)outer), kThreads, smem, dev.stream()>>>(
        x, n, kSplitChunk, part);
    RBEE_GPU_CHECK_LAUNCH();
    reduce_row_partials_kernel<T, Op><<<(unsigned)outer, kThreads, smem, dev.stream()>>>(part, (int)splits, x, n, dst);
  } else if (inner == 1) {
    const int group = row_group_size(n, 4);
    reduce_rows_kernel<T, Op><<<blocks_for(outer, kThreads / group), kThreads, smem, dev.stream()>>>(x, outer, n,
                                                                                                   group, dst);
  } else {
    reduce_columns_kernel<T, Op><<<blocks_for(outer * ceil_div(inner, kColumns), 1), kThreads, smem, dev.stream()>>>(
        x, outer, n, inner, dst);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

// ---- softmax ----

template <class C>
struct NanMax {
  // max that propagates NaN (fmax would drop it).
  __device__ C operator()(C a, C b) const { return (a != a || b != b) ? quiet_nan<C>() : (a > b ? a : b); }
};
template <class C>
struct Plus {
  __device__ C operator()(C a, C b) const { return a + b; }
};

// x, out [rows, n]: `group` threads per row. With `cache`, each row's values (then its exponentials) stay in
// shared memory after the first read; otherwise every pass re-reads x (from L2 for rows that fit there).
template <class T>
__global__ void softmax_kernel(const T* x, T* out, int64_t rows, int64_t n, int group, bool cache) {
  using C = compute_t<T>;
  C* scratch = dynamic_smem<C>();
  const int lane = threadIdx.x & (group - 1), slot = threadIdx.x / group, per_block = blockDim.x / group;
  C* row_cache = scratch + blockDim.x + (int64_t)slot * n;
  const C neg_inf = -(C)INFINITY;
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + slot;
    const bool active = r < rows;
    const T* xr = x + r * n;
    T* yr = out + r * n;
    C m = neg_inf;
    if (active) {
      for (int64_t j = lane; j < n; j += group) {
        const C v = load(xr + j);
        if (cache) row_cache[j] = v;
        m = NanMax<C>{}(m, v);
      }
    }
    m = group_reduce(m, NanMax<C>{}, scratch, group);
    // NaN, +inf or an all -inf row: the exact result is undefined.
    const bool undefined = !(m > neg_inf && m < (C)INFINITY);
    C s = 0;
    if (active && !undefined) {
      for (int64_t j = lane; j < n; j += group) {
        const C e = exp_c((cache ? row_cache[j] : load(xr + j)) - m);
        if (cache) row_cache[j] = e;
        s += e;
      }
    }
    s = group_reduce(s, Plus<C>{}, scratch, group);
    if (active) {
      const C inv = C(1) / s;  // s >= 1: the maximum contributes exp(0)
      for (int64_t j = lane; j < n; j += group) {
        if (undefined) store(yr + j, quiet_nan<C>());
        else store(yr + j, (cache ? row_cache[j] : exp_c(load(xr + j) - m)) * inv);
      }
    }
  }
}

}  // namespace

void GpuKernels::reduce(ReduceOp op, const Tensor& x, int axis, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const axis::AxisSplit split = axis::split_at(x.shape(), axis);
  const int64_t outer = split.outer, n = split.n, inner = split.inner;
  visit_plain_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data());
    switch (op) {
      case ReduceOp::Sum: return launch_reduce<T, SumOp<T>>(device_, src, outer, n, inner, out.data());
      case ReduceOp::Min: return launch_reduce<T, ExtremeOp<T, false, false>>(device_, src, outer, n, inner, out.data());
      case ReduceOp::Max: return launch_reduce<T, ExtremeOp<T, true, false>>(device_, src, outer, n, inner, out.data());
      case ReduceOp::ArgMin:
        return launch_reduce<T, ExtremeOp<T, false, true>>(device_, src, outer, n, inner, out.data());
      case ReduceOp::ArgMax:
        return launch_reduce<T, ExtremeOp<T, true, true>>(device_, src, outer, n, inner, out.data());
    }
  });
}

void GpuKernels::softmax(const Tensor& x, Tensor& out) {
  device_.activate();
  if (x.numel() == 0) return;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const int group = row_group_size(n, 8), per_block = kThreads / group;
    constexpr size_t kCacheBytes = 32 << 10;
    const bool cache = (size_t)(per_block * n) * sizeof(C) <= kCacheBytes;
    const size_t smem = (kThreads + (cache ? per_block * n : 0)) * sizeof(C);
    softmax_kernel<T><<<blocks_for(rows, per_block), kThreads, smem, device_.stream()>>>(
        static_cast<const T*>(x.data()), static_cast<T*>(out.data()), rows, n, group, cache);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
