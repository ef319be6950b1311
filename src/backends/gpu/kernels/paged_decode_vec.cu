// Paged attention for decode shapes with small GQA groups on the vector units (contract: PagedAttention in
// rbee/backend/op_table.def; same numerics as the tensor-core kernels of paged_flash.cuh: q rounded to the cache's
// type, s = softcap(scale * q.k) in f32, online softmax in f32, each probability rounded to the cache's type before
// it weights v, the denominator summing the f32 probabilities).
//
// Why: a decode step has one query row per sequence and, without GQA (or with a group of 2..4), one to four query
// heads per kv head. The tensor-core decode tile holds 16 rows, so it wastes most of its work and launches short
// blocks; this kernel reads each (sequence, kv head)'s K and V rows once, with 16-byte loads, at bandwidth.
//
// Layout: a block of kThreads threads owns (query token, kv head, split of the key range) and all G <= kMaxGroup
// query heads of that kv head. Within a warp, L = D / 8 lanes cover one key row (8 elements = 16 bytes each), so a
// warp step visits W / L keys; each warp takes kUnroll steps per iteration (all their K and V loads issued before
// any arithmetic), warps interleave over the key range. Each warp keeps its own running max (warp-uniform per head),
// per-lane sums and accumulators; at the end the key sub-groups of a warp are summed with shuffles and the warps
// merged through shared memory. With one split the block writes the output, otherwise the split partials for
// paged.cu's merge kernel (PagedMergeParams in paged_common.cuh).
// Grid sizes depend only on shapes; every index read from device tensors is clamped (as in paged.cu), and a
// sequence with several query rows is still handled (one block per query token), just not fast.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backends/common/attention_math.h"
#include "backends/common/batch_invariant.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/paged_common.cuh"
#include "backends/gpu/kernels/paged_decode_vec.h"
#include "backends/gpu/kernels/paged_flash.h"
#include "backends/gpu/kernels/quant_launch.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;    // warp steps whose loads are in flight at once
constexpr int kMaxGroup = 4;  // query heads per kv head served

// 8 cache elements (16 bytes) as floats.
template <class C>
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<C, bf16_t>) {
      f[2 * i] = bf16_to_float((uint16_t)(w[i] & 0xFFFFu));
      f[2 * i + 1] = bf16_to_float((uint16_t)(w[i] >> 16));
    } else {
      f[2 * i] = f16_to_float((uint16_t)(w[i] & 0xFFFFu));
      f[2 * i + 1] = f16_to_float((uint16_t)(w[i] >> 16));
    }
  }
}
template <class C>
__device__ __forceinline__ float round_to_cache(float x) {
  if constexpr (std::is_same_v<C, bf16_t>) return bf16_to_float(float_to_bf16(x));
  else return f16_to_float(float_to_f16(x));
}

// C: f16_t or bf16_t. D: head size (8 * L with L a power of two <= the warp size). G: query heads per block
// (p.group <= G; heads past p.group are computed on zeros and never written).
template <class C, int D, int G>
__global__ void __launch_bounds__(kThreads) paged_decode_vec_kernel(PagedLaunch p) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE, NW = kThreads / W;
  constexpr int L = D / 8, KS = W / L;  // lanes per key row, keys per warp step
  static_assert(D % 8 == 0 && L <= W && (L & (L - 1)) == 0, "head size must be 8 * a power of two <= warp size");
  __shared__ float red_acc[NW][G][D];
  __shared__ float red_ml[NW][G][2];

  const int lane = threadIdx.x % W, warp = threadIdx.x / W;
  const int sub = lane / L, li = lane % L;  // key of the step, dims 8 li .. 8 li + 7
  // Launched after rope + cache write as a programmatic dependent launch (launch_for_group): q, the cache and the
  // step's indices are read only after the wait.
  grid_dependency_trigger();
  grid_dependency_wait();

  int q_start = 0, q_len = 0, ctx = 0, tok0 = 0;
  const int seq = find_tile(p.seqs, 1, blockIdx.x, q_start, q_len, ctx, tok0);
  if (seq < 0) return;
  const int64_t t = q_start + tok0;
  const int qpos = ctx - q_len + tok0;
  const int g = blockIdx.y, h0 = g * p.group;
  const int split = blockIdx.z;
  const int key_lo = max(p.window > 0 ? qpos - p.window + 1 : 0, split * p.split_len);
  const int key_hi = min(qpos + 1, (split + 1) * p.split_len);  // exclusive

  // This lane's 8 dims of each head's query: rounded to the cache's type, then scaled.
  float q[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[h][i] = h < p.group ? round_to_cache<C>(p.q[t * p.q_s0 + (int64_t)(h0 + h) * p.q_s1 + 8 * li + i]) * p.scale
                            : 0.f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.f;
  }

  const uint16_t* kc = static_cast<const uint16_t*>(p.k_cache);
  const uint16_t* vc = static_cast<const uint16_t*>(p.v_cache);
  const int32_t* seq_table = p.tables + (int64_t)seq * p.max_blocks;
  constexpr int kWarpKeys = KS * kUnroll;
  // The trip count is the same for every warp (keys past key_hi are masked): shuffles stay uniform over the block,
  // as the CPU emulator's block-wide exchanges require.
  for (int block_base = key_lo; block_base < key_hi; block_base += NW * kWarpKeys) {
    const int base = block_base + warp * kWarpKeys;
    uint4 kv[kUnroll], vv[kUnroll];
    bool in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = base + u * KS + sub;
      in[u] = key < key_hi;
      kv[u] = vv[u] = make_uint4(0u, 0u, 0u, 0u);
      if (in[u]) {
        const int blk = min(max(seq_table[key / p.block_size], 0), p.num_blocks - 1);
        const int64_t off = (((int64_t)blk * p.block_size + key % p.block_size) * p.hkv + g) * D + 8 * li;
        kv[u] = *reinterpret_cast<const uint4*>(kc + off);
        vv[u] = *reinterpret_cast<const uint4*>(vc + off);
      }
    }
    // Scores of this lane's keys (the dot product summed over the L lanes of the key row).
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k8[8];
      unpack8<C>(kv[u], k8);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += q[h][i] * k8[i];
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) dot += shfl_xor(dot, o);
        s[u][h] = in[u] ? attention::soft_cap(dot, p.softcap) : -INFINITY;
      }
    }
    // Online softmax: the warp's running max over all its keys so far (uniform over the warp).
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float tmax = s[0][h];
#pragma unroll
      for (int u = 1; u < kUnroll; ++u) tmax = fmaxf(tmax, s[u][h]);
#pragma unroll
      for (int o = L; o < W; o <<= 1) tmax = fmaxf(tmax, shfl_xor(tmax, o));
      const float new_max = fmaxf(m[h], tmax);
      if (new_max == -INFINITY) continue;  // no visible key yet (uniform over the warp)
      const float corr = expf(m[h] - new_max);  // 0 when m was -inf
      m[h] = new_max;
      l[h] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float e = expf(s[u][h] - new_max);  // 0 for keys out of range
        l[h] += e;
        const float pr = round_to_cache<C>(e);
        float v8[8];
        unpack8<C>(vv[u], v8);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] += pr * v8[i];
      }
    }
  }

  // Sum the warp's key sub-groups (same running max across them), then merge the warps.
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int o = L; o < W; o <<= 1) {
      l[h] += shfl_xor(l[h], o);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] += shfl_xor(acc[h][i], o);
    }
    if (sub == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) red_acc[warp][h][8 * li + i] = acc[h][i];
      if (li == 0) {
        red_ml[warp][h][0] = m[h];
        red_ml[warp][h][1] = l[h];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.group * D; e += kThreads) {
    const int h = e / D, i = e % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, red_ml[w][h][0]);
    float sum = 0.f, den = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float mw = red_ml[w][h][0];
        if (mw == -INFINITY) continue;
        const float f = expf(mw - mx);
        sum += f * red_acc[w][h][i];
        den += f * red_ml[w][h][1];
      }
    }
    const int64_t o = (t * p.hq + h0 + h) * D + i;
    if (p.n_splits == 1) {
      p.out[o] = den > 0.f ? sum / den : 0.f;
    } else {
      p.part_acc[(int64_t)split * p.seqs.nq * p.hq * D + o] = sum;
      if (i == 0) {
        float* ml = p.part_ml + (((int64_t)split * p.seqs.nq + t) * p.hq + h0 + h) * 2;
        ml[0] = mx;
        ml[1] = den;
      }
    }
  }
}

// A programmatic dependent launch under quant::pdl_enabled() (the kernel waits for q and the cache first).
template <class C, int D>
void launch_for_group(GpuDevice& dev, int group, const PagedLaunch& p, dim3 grid) {
  auto kernel = group == 1   ? paged_decode_vec_kernel<C, D, 1>
                : group == 2 ? paged_decode_vec_kernel<C, D, 2>
                             : paged_decode_vec_kernel<C, D, kMaxGroup>;
  quant::launch_decode_kernel(kernel, grid, dim3(kThreads), 0, dev.stream(), p);
}

template <class C>
void launch_for_head_size(GpuDevice& dev, int d, int group, const PagedLaunch& p, dim3 grid) {
  if (d == 64) launch_for_group<C, 64>(dev, group, p, grid);
  else if (d == 128) launch_for_group<C, 128>(dev, group, p, grid);
  else launch_for_group<C, 256>(dev, group, p, grid);
}

// RBEE_ATTN_DECODE_VEC=0 keeps decode steps on the tensor-core / scalar kernels (A/B comparisons, fallback). Read
// at every call, as RBEE_PAGED_FLASH is, so a benchmark can switch kernels within one process.
bool decode_vec_enabled() {
  return env::flag_or("RBEE_ATTN_DECODE_VEC", true);
}

}  // namespace

bool paged_attention_decode_vec(GpuDevice& dev, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                Tensor& out) {
  const DType dtype = k_cache.dtype();
  const int d = (int)k_cache.dim(3);
  const int nq = (int)q.dim(0), hq = (int)q.dim(1), n_seq = (int)seq_info.dim(0);
  const int hkv = (int)k_cache.dim(2), group = hq / hkv;
  // Batch-invariant mode keeps every launch on one configuration of the tensor-core kernel (batch_invariant.h).
  if (!decode_vec_enabled() || batch_invariant()) return false;
  if ((dtype != DType::F16 && dtype != DType::BF16) || (d != 64 && d != 128 && d != 256)) return false;
  if (d / 8 > RBEE_DEVICE_WARP_SIZE || group < 1 || group > kMaxGroup || nq > n_seq) return false;
  if ((reinterpret_cast<uintptr_t>(k_cache.data()) | reinterpret_cast<uintptr_t>(v_cache.data())) % 16 != 0) {
    return false;
  }

  PagedLaunch p{};
  const int64_t tiles = fill_paged_launch(p, q, k_cache, v_cache, seq_info, block_tables, params, group);
  // group <= kMaxGroup rows: one head chunk of the whole group, one token per tile (nq <= n_seq).
  RBEE_CHECK_CODE(p.tile_tokens == 1 && p.n_head_chunks == 1 && tiles <= INT32_MAX && hkv <= 65535,
                  ErrorCode::Unsupported, "paged_attention: decode launch too large ({} tiles, {} kv heads)", tiles,
                  hkv);

  // Splits of the key range as for the tensor-core decode tiles (paged_flash.cu): none up to
  // paged_split_min_ctx() positions, else enough blocks for ~4 per multiprocessor (these blocks are small), each
  // split a whole number of block iterations.
  const int64_t block_keys = (int64_t)kThreads / (d / 8) * kUnroll;  // keys one block visits per iteration
  PagedPartials partials;
  plan_paged_splits(p, dev, (int64_t)p.max_blocks * p.block_size, block_keys, tiles * hkv,
                    4 * (int64_t)dev.props().multiprocessors, paged_split_min_ctx(), false, out, partials);
  const dim3 grid((unsigned)tiles, (unsigned)hkv, (unsigned)p.n_splits);
  if (dtype == DType::F16) launch_for_head_size<f16_t>(dev, d, group, p, grid);
  else launch_for_head_size<bf16_t>(dev, d, group, p, grid);
  merge_paged_splits(dev, p, d);
  return true;
}

}  // namespace rbee::gpu
