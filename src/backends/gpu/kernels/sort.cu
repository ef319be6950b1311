// GPU argsort over the last axis of a contiguous tensor: stable, with the CPU's order (cpu_reduce.cpp): NaN
// above every number (+inf included), -0 equal to +0, equal keys (and NaNs among themselves) in index order.
//
// Each element becomes one integer sort entry (key, index): the key is an order-preserving integer image of
// the value (NaNs collapsed to the largest key, -0 to +0; bitwise negated for a descending sort), and the index
// breaks ties. The entries are distinct, so a bitonic network, which is not stable by itself, yields exactly
// the stable order. A row is padded to P = next power of two with sentinel entries that sort last.
// - P <= S (S = 4096 entries for 32-bit keys, 2048 for 64-bit keys; 32 KiB of shared memory): one block sorts
//   a row in shared memory.
// - Longer rows: blocks sort chunks of S entries in shared memory, then each merge stage k > S runs its steps
//   j >= S as one global-memory pass each and its steps j < S in shared memory, chunk by chunk. Every step is
//   the same network step (compare-exchange of i and i ^ j, ascending when bit k of i is clear), so the result
//   is the same whatever the split.
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"

namespace rbee::gpu {

namespace {

constexpr int64_t kSortBytes = 32 << 10;  // shared memory for one block's entries
constexpr int kMaxSortThreads = 512;

// 32-bit keys pack with a 32-bit index into one 64-bit entry; 64-bit keys (f64, i64) take a pair.
struct WideEntry {
  unsigned long long key, index;
};
template <class T>
inline constexpr bool kWideKey = std::is_same_v<T, double> || std::is_same_v<T, int64_t>;
template <class T>
using EntryOf = std::conditional_t<kWideKey<T>, WideEntry, unsigned long long>;

__device__ inline bool entry_less(unsigned long long a, unsigned long long b) { return a < b; }
__device__ inline bool entry_less(const WideEntry& a, const WideEntry& b) {
  return a.key < b.key || (a.key == b.key && a.index < b.index);
}
__device__ inline int64_t entry_index(unsigned long long e) { return (int64_t)(e & 0xffffffffull); }
__device__ inline int64_t entry_index(const WideEntry& e) { return (int64_t)e.index; }

// Order-preserving keys: a < b (with the CPU's NaN and zero conventions) iff key(a) < key(b).
__device__ inline unsigned int float_key(float f) {
  if (f != f) return 0xffffffffu;  // every NaN: above +inf (0xff800000)
  if (f == 0.0f) f = 0.0f;         // -0 -> +0
  const unsigned int b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ inline unsigned long long double_key(double f) {
  if (f != f) return ~0ull;
  if (f == 0.0) f = 0.0;
  const unsigned long long b = (unsigned long long)__double_as_longlong(f);
  return (b >> 63) ? ~b : (b | (1ull << 63));
}
template <class T>
__device__ inline auto order_key(const T& v) {
  if constexpr (std::is_same_v<T, double>) return double_key(v);
  else if constexpr (std::is_same_v<T, int64_t>) return (unsigned long long)v ^ (1ull << 63);
  else if constexpr (std::is_same_v<T, int32_t>) return (unsigned int)v ^ 0x80000000u;
  else if constexpr (std::is_same_v<T, uint32_t> || std::is_same_v<T, uint8_t>) return (unsigned int)v;
  else return float_key(load(&v));  // f32, f16, bf16
}

// The entry of position i of a row of n values (a sentinel past the end).
template <class T>
__device__ inline EntryOf<T> make_entry(const T* row, int64_t i, int64_t n, bool ascending) {
  if constexpr (kWideKey<T>) {
    if (i >= n) return WideEntry{~0ull, ~0ull};
    const unsigned long long k = order_key(row[i]);
    return WideEntry{ascending ? k : ~k, (unsigned long long)i};
  } else {
    if (i >= n) return ~0ull;  // indices stay below 0xffffffff, so real entries are smaller
    const unsigned int k = order_key(row[i]);
    return ((unsigned long long)(ascending ? k : ~k) << 32) | (unsigned long long)i;
  }
}

// Steps j = j_start, j_start / 2, ..., 1 of bitonic stage k on `count` entries in shared memory; s[i] is
// element base + i of the row. Synchronizes the block after each step.
template <class E>
__device__ void bitonic_steps(E* s, int count, int64_t base, int64_t k, int j_start) {
  for (int j = j_start; j > 0; j >>= 1) {
    for (int t = threadIdx.x; t < count / 2; t += blockDim.x) {
      const int i = 2 * t - (t & (j - 1)), l = i + j;  // i has bit j clear
      const bool up = ((base + i) & k) == 0;
      const E a = s[i], b = s[l];
      if (up ? entry_less(b, a) : entry_less(a, b)) {
        s[i] = b;
        s[l] = a;
      }
    }
    __syncthreads();
  }
}

// Whole rows in shared memory: x [rows, n] -> out [rows, n] indices; p = padded row length (<= S).
template <class T>
__global__ void sort_rows_kernel(const T* x, int64_t rows, int64_t n, int p, bool ascending, int64_t* out) {
  using E = EntryOf<T>;
  E* s = dynamic_smem<E>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int i = threadIdx.x; i < p; i += blockDim.x) s[i] = make_entry(x + r * n, i, n, ascending);
    __syncthreads();
    for (int64_t k = 2; k <= p; k <<= 1) bitonic_steps(s, p, 0, k, (int)(k >> 1));
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[r * n + i] = entry_index(s[i]);
    __syncthreads();
  }
}

// Long rows, first pass: chunk c of row r (entries c*s_len ...) sorted through stages k <= s_len into tmp
// [rows, p].
template <class T>
__global__ void sort_chunks_kernel(const T* x, int64_t rows, int64_t n, int64_t p, int s_len, bool ascending,
                                   EntryOf<T>* tmp) {
  using E = EntryOf<T>;
  E* s = dynamic_smem<E>();
  const int64_t chunks = p / s_len;
  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
    const int64_t r = item / chunks, base = item % chunks * s_len;
    for (int i = threadIdx.x; i < s_len; i += blockDim.x) s[i] = make_entry(x + r * n, base + i, n, ascending);
    __syncthreads();
    for (int64_t k = 2; k <= s_len; k <<= 1) bitonic_steps(s, s_len, base, k, (int)(k >> 1));
    E* dst = tmp + r * p + base;
    for (int i = threadIdx.x; i < s_len; i += blockDim.x) dst[i] = s[i];
    __syncthreads();
  }
}

// One global step (stage k, distance j >= s_len) over all rows of tmp [rows, p].
template <class E>
__global__ void merge_step_kernel(E* tmp, int64_t rows, int64_t p, int64_t k, int64_t j) {
  const int64_t pairs = p / 2;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * pairs;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / pairs, tt = t % pairs;
    const int64_t i = 2 * tt - (tt & (j - 1)), l = i + j;
    E* row = tmp + r * p;
    const bool up = (i & k) == 0;
    const E a = row[i], b = row[l];
    if (up ? entry_less(b, a) : entry_less(a, b)) {
      row[i] = b;
      row[l] = a;
    }
  }
}

// The steps j < s_len of stage k, chunk by chunk in shared memory. The last stage (k == p) writes the indices
// of the first n entries of each row to out [rows, n] instead of storing the chunk back.
template <class E>
__global__ void merge_chunks_kernel(E* tmp, int64_t rows, int64_t p, int s_len, int64_t k, int64_t n,
                                    int64_t* out) {
  E* s = dynamic_smem<E>();
  const int64_t chunks = p / s_len;
  const bool last = k == p;
  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
    const int64_t r = item / chunks, base = item % chunks * s_len;
    E* src = tmp + r * p + base;
    for (int i = threadIdx.x; i < s_len; i += blockDim.x) s[i] = src[i];
    __syncthreads();
    bitonic_steps(s, s_len, base, k, s_len >> 1);
    for (int i = threadIdx.x; i < s_len; i += blockDim.x) {
      if (!last) src[i] = s[i];
      else if (base + i < n) out[r * n + base + i] = entry_index(s[i]);
    }
    __syncthreads();
  }
}

int sort_threads(int64_t entries) { return (int)std::clamp<int64_t>(entries / 2, 32, kMaxSortThreads); }

template <class T>
void run_argsort(GpuDevice& dev, const T* x, int64_t rows, int64_t n, bool ascending, int64_t* out) {
  using E = EntryOf<T>;
  const int64_t p = pow2_ceil(n);
  const int s_len = (int)(kSortBytes / (int64_t)sizeof(E));
  if (p <= s_len) {
    sort_rows_kernel<T><<<blocks_for(rows, 1), sort_threads(p), (size_t)p * sizeof(E), dev.stream()>>>(
        x, rows, n, (int)p, ascending, out);
    RBEE_GPU_CHECK_LAUNCH();
    return;
  }
  const Tensor scratch = Tensor::empty({rows * p * (int64_t)sizeof(E)}, DType::U8, dev);
  E* tmp = static_cast<E*>(scratch.data());
  const int64_t chunks = p / s_len;
  const size_t smem = (size_t)s_len * sizeof(E);
  sort_chunks_kernel<T><<<blocks_for(rows * chunks, 1), sort_threads(s_len), smem, dev.stream()>>>(
      x, rows, n, p, s_len, ascending, tmp);
  RBEE_GPU_CHECK_LAUNCH();
  for (int64_t k = 2 * (int64_t)s_len; k <= p; k <<= 1) {
    for (int64_t j = k / 2; j >= s_len; j >>= 1) {
      merge_step_kernel<E><<<blocks_for(rows * p / 2, 256), 256, 0, dev.stream()>>>(tmp, rows, p, k, j);
      RBEE_GPU_CHECK_LAUNCH();
    }
    merge_chunks_kernel<E><<<blocks_for(rows * chunks, 1), sort_threads(s_len), smem, dev.stream()>>>(
        tmp, rows, p, s_len, k, n, out);
    RBEE_GPU_CHECK_LAUNCH();
  }
}

}  // namespace

void GpuKernels::argsort(const Tensor& x, bool ascending, Tensor& out) {
  device_.activate();
  if (x.numel() == 0) return;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  // Packed entries keep the index in 32 bits, with 0xffffffff reserved for padding.
  RBEE_CHECK_CODE(n < 0xffffffffLL, ErrorCode::Unsupported, "argsort: rows of {} elements exceed the GPU sort's {}",
                  n, 0xffffffffLL - 1);
  visit_plain_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    run_argsort<T>(device_, static_cast<const T*>(x.data()), rows, n, ascending, static_cast<int64_t*>(out.data()));
  });
}

}  // namespace rbee::gpu
