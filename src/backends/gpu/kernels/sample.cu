// GpuKernels::sample: one token per row of logits [B, V], by the definition in op_table.def with the
// arithmetic of backends/common/sampling.h, so the ids equal the CPU kernel's (and llm::Sampler's).
//
// One block of kThreads threads per row; every step is a pass over the row (from L2 after the first):
//  - adjusted logits: the row copied to a scratch row, then the listed tokens' bias and penalties (only when the
//    row lists tokens);
//  - greedy: the largest order_key (value, then smaller id) over the row, a block max;
//  - otherwise: the largest key (c_max) and the candidate count; top-k and top-p thresholds by radix selection
//    over the 64-bit keys, 8 bits a pass from the top, with a histogram of counts (top-k) or integer weights
//    (top-p) in shared memory; a pass stops early when the chosen bucket holds a single key. The totals are
//    integers, so the order in which threads add them does not matter;
//  - the draw: each thread sums the survivors' weights of a contiguous id range, an exclusive scan over the
//    threads orders those ranges by id, and the thread whose range holds r walks it to the token.
// Launch shapes depend only on B, V and H: the op can be recorded in a graph.
#include "backends/gpu/kernels/common.cuh"  // first: the platform header, for device memcpy
#include "backends/common/sampling.h"
#include "backends/gpu/gpu_kernels.h"

namespace rbee::gpu {

namespace {

namespace s = ::rbee::sampling;

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kBuckets = 256;  // 8-bit digits of the 64-bit keys

struct SampleArgs {
  const float* logits;
  float* adjusted;  // [B, V] scratch, only when h > 0
  int64_t vocab;
  const float* params;
  const int64_t* control;
  const int32_t* tokens;
  const float* bias;
  int64_t h;
  int32_t* out;
};

struct Shared {
  u64 hist[kBuckets];        // weight per digit of the keys under the current prefix
  unsigned count[kBuckets];  // keys per digit
  u64 suffix[kBuckets + 1];  // suffix[d] = sum of hist[d..]
  u64 scan[kThreads];        // the draw's exclusive scan over threads
  u64 slot;                  // block reductions
  u64 found_key, found_above;
  int found_digit, found_unique;
};

__device__ inline u64 warp_sum_u64(u64 v) {
  for (int m = RBEE_DEVICE_WARP_SIZE / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}
__device__ inline u64 warp_max_u64(u64 v) {
  for (int m = RBEE_DEVICE_WARP_SIZE / 2; m > 0; m >>= 1) {
    const u64 o = shfl_xor(v, m);
    v = o > v ? o : v;
  }
  return v;
}
// Block-wide sum / max; every thread gets the result.
__device__ inline u64 block_sum_u64(u64 v, Shared& sh) {
  if (threadIdx.x == 0) sh.slot = 0;
  __syncthreads();
  v = warp_sum_u64(v);
  if (threadIdx.x % RBEE_DEVICE_WARP_SIZE == 0 && v != 0) atomic_add_u64(&sh.slot, v);
  __syncthreads();
  const u64 r = sh.slot;
  __syncthreads();
  return r;
}
__device__ inline u64 block_max_u64(u64 v, Shared& sh) {
  if (threadIdx.x == 0) sh.slot = 0;
  __syncthreads();
  v = warp_max_u64(v);
  if (threadIdx.x % RBEE_DEVICE_WARP_SIZE == 0 && v != 0) atomic_max_u64(&sh.slot, v);
  __syncthreads();
  const u64 r = sh.slot;
  __syncthreads();
  return r;
}

// The row as the sampler sees it: c = l / temperature for candidates.
struct RowView {
  const float* l;
  int64_t vocab;
  float temperature;
  float c_max;
  __device__ bool candidate(int64_t i, float& c, u64& key) const {
    const float v = l[i];
    if (!s::is_candidate(v)) return false;
    c = s::div(v, temperature);
    key = s::order_key(c, (int32_t)i);
    return true;
  }
};

// The key at which the running total of weigh(c) over the candidates with key >= floor_key, taken in key order
// (largest first), first satisfies reach(). reach(total of all of them) must hold and reach(0) must not.
template <class Weigh, class Reach>
__device__ u64 radix_select(const RowView& row, u64 floor_key, Weigh weigh, Reach reach, Shared& sh) {
  u64 prefix = 0, above = 0;
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    for (int d = threadIdx.x; d < kBuckets; d += blockDim.x) {
      sh.hist[d] = 0;
      sh.count[d] = 0;
    }
    __syncthreads();
    // Each thread adds runs of equal digits at once: early passes see few distinct digits.
    int run_digit = -1;
    u64 run_weight = 0;
    unsigned run_count = 0;
    for (int64_t i = threadIdx.x; i < row.vocab; i += blockDim.x) {
      float c;
      u64 key;
      if (!row.candidate(i, c, key) || key < floor_key) continue;
      if (pass > 0 && (key >> (shift + 8)) != prefix) continue;
      const int d = (int)((key >> shift) & 0xFF);
      if (d != run_digit) {
        if (run_count != 0) {
          atomic_add_u64(&sh.hist[run_digit], run_weight);
          atomic_add_u32(&sh.count[run_digit], run_count);
        }
        run_digit = d;
        run_weight = 0;
        run_count = 0;
      }
      run_weight += weigh(c);
      ++run_count;
    }
    if (run_count != 0) {
      atomic_add_u64(&sh.hist[run_digit], run_weight);
      atomic_add_u32(&sh.count[run_digit], run_count);
    }
    __syncthreads();
    // suffix[d] = hist[d] + ... + hist[255] (Hillis-Steele from the top), suffix[256] = 0.
    if (threadIdx.x < kBuckets) sh.suffix[threadIdx.x] = sh.hist[threadIdx.x];
    if (threadIdx.x == 0) sh.suffix[kBuckets] = 0;
    __syncthreads();
    for (int off = 1; off < kBuckets; off <<= 1) {
      u64 add = 0;
      if (threadIdx.x < kBuckets && threadIdx.x + off < kBuckets) add = sh.suffix[threadIdx.x + off];
      __syncthreads();
      if (threadIdx.x < kBuckets) sh.suffix[threadIdx.x] += add;
      __syncthreads();
    }
    // Exactly one digit has reach() switch on between its suffix and the next one.
    if (threadIdx.x < kBuckets) {
      const int d = threadIdx.x;
      if (reach(above + sh.suffix[d]) && !reach(above + sh.suffix[d + 1])) {
        sh.found_digit = d;
        sh.found_above = above + sh.suffix[d + 1];
        sh.found_unique = sh.count[d] == 1;
      }
    }
    __syncthreads();
    prefix = (prefix << 8) | (u64)sh.found_digit;
    above = sh.found_above;
    const bool unique = sh.found_unique != 0;
    __syncthreads();
    if (unique && pass < 7) {
      // One key under this prefix: it is the answer; one more pass finds its low bits.
      for (int64_t i = threadIdx.x; i < row.vocab; i += blockDim.x) {
        float c;
        u64 key;
        if (row.candidate(i, c, key) && key >= floor_key && (key >> shift) == prefix) sh.found_key = key;
      }
      __syncthreads();
      const u64 key = sh.found_key;
      __syncthreads();
      return key;
    }
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const int64_t vocab = a.vocab;
  const float* p = a.params + r * kSampleParams;
  const int64_t* ctl = a.control + r * kSampleControls;
  const float* l = a.logits + r * vocab;
  if (a.h > 0) {
    float* w = a.adjusted + r * vocab;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) w[i] = l[i];
    __syncthreads();
    const int32_t* t = a.tokens + r * a.h * 2;
    const float* b = a.bias + r * a.h;
    for (int64_t j = threadIdx.x; j < a.h; j += blockDim.x) {
      const int32_t id = t[2 * j], count = t[2 * j + 1];
      if (id >= 0 && id < vocab) {
        w[id] = s::adjust(w[id], b[j], count, p[sample_col::kRepetition], p[sample_col::kPresence],
                          p[sample_col::kFrequency]);
      }
    }
    __syncthreads();
    l = w;
  }
  const float temperature = p[sample_col::kTemperature];
  const bool greedy = !(temperature > 0.f);
  u64 best = 0, candidates = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = l[i];
    u64 key = 0;
    if (greedy) {
      if (v == v) key = s::order_key(v, (int32_t)i);
    } else if (s::is_candidate(v)) {
      key = s::order_key(s::div(v, temperature), (int32_t)i);
      ++candidates;
    }
    best = key > best ? key : best;
  }
  best = block_max_u64(best, sh);
  if (greedy || best == 0) {
    if (threadIdx.x == 0) a.out[r] = best != 0 ? s::key_id(best) : -1;
    return;
  }
  candidates = block_sum_u64(candidates, sh);
  const RowView row{l, vocab, temperature, s::div(l[s::key_id(best)], temperature)};
  auto weigh = [&](float c) -> u64 { return s::weight(c, row.c_max); };

  // top-k: keys >= the k-th largest.
  u64 floor_key = 1;
  const int64_t top_k = ctl[sample_col::kTopK];
  if (top_k > 0 && (u64)top_k < candidates) {
    floor_key = radix_select(row, floor_key, [](float) -> u64 { return 1; },
                             [&](u64 n) { return n >= (u64)top_k; }, sh);
  }
  // top-p: keys >= the first at which the running weight reaches top_p of the survivors' total.
  const float top_p = p[sample_col::kTopP];
  if (top_p < 1.f) {
    u64 total = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      float c;
      u64 key;
      if (row.candidate(i, c, key) && key >= floor_key) total += weigh(c);
    }
    total = block_sum_u64(total, sh);
    const double threshold = s::top_p_threshold(total, top_p);
    floor_key = radix_select(row, floor_key, weigh, [&](u64 w) { return s::reaches(w, threshold); }, sh);
  }
  const float min_p = p[sample_col::kMinP];
  const double min_weight = s::min_p_threshold(min_p);
  auto survivor_weight = [&](int64_t i) -> u64 {
    float c;
    u64 key;
    if (!row.candidate(i, c, key) || key < floor_key) return 0;
    const u64 w = weigh(c);
    return min_p > 0.f && !((double)w >= min_weight) ? 0 : w;
  };

  // The draw, in id order: thread t owns ids [t * span, (t + 1) * span).
  const int64_t span = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t i0 = (int64_t)threadIdx.x * span, i1 = i0 + span < vocab ? i0 + span : vocab;
  u64 mine = 0;
  for (int64_t i = i0; i < i1; ++i) mine += survivor_weight(i);
  sh.scan[threadIdx.x] = mine;
  __syncthreads();
  for (int off = 1; off < (int)blockDim.x; off <<= 1) {
    const u64 add = (int)threadIdx.x >= off ? sh.scan[threadIdx.x - off] : 0;
    __syncthreads();
    sh.scan[threadIdx.x] += add;
    __syncthreads();
  }
  const u64 mass = sh.scan[blockDim.x - 1];
  const u64 before = sh.scan[threadIdx.x] - mine;
  const u64 target =
      s::scale_to(s::random_word((uint64_t)ctl[sample_col::kSeed], (uint64_t)ctl[sample_col::kDraw]), mass);
  if (mine != 0 && before <= target && target < before + mine) {
    u64 cum = before;
    for (int64_t i = i0; i < i1; ++i) {
      cum += survivor_weight(i);
      if (target < cum) {
        a.out[r] = (int32_t)i;
        break;
      }
    }
  }
}

}  // namespace

void GpuKernels::sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
                        const Tensor& bias, Tensor& out) {
  device_.activate();
  const int64_t rows = logits.dim(0), vocab = logits.dim(1), h = tokens.dim(1);
  RBEE_CHECK(rows <= 0x7FFFFFFF, "sample: {} rows exceed one launch", rows);
  Tensor adjusted;
  if (h > 0) adjusted = Tensor::empty({rows, vocab}, DType::F32, device_);
  const SampleArgs a{static_cast<const float*>(logits.data()),
                     h > 0 ? static_cast<float*>(adjusted.data()) : nullptr,
                     vocab,
                     static_cast<const float*>(params.data()),
                     static_cast<const int64_t*>(control.data()),
                     static_cast<const int32_t*>(tokens.data()),
                     static_cast<const float*>(bias.data()),
                     h,
                     static_cast<int32_t*>(out.data())};
  sample_kernel<<<(unsigned)rows, kThreads, 0, device_.stream()>>>(a);
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace rbee::gpu
