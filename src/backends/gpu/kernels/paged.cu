// Paged KV cache on the GPU: kv_cache_write and paged_attention (contracts in rbee/backend/op_table.def).
//
// paged_attention on F16 / BF16 caches with head sizes 64 / 128 / 256 runs, for decode steps with at most 4 query
// heads per kv head, on the vector kernel of paged_decode_vec.cu, otherwise on the matrix tiles (paged_flash.cu). Everything else (F32 caches, other head sizes, shared memory too small) takes the scalar
// tiled kernel below, with the same semantics (q and the probabilities rounded to a 16-bit cache's type), plus
// the split merge both use:
//  - A thread block owns a query tile: up to `rows` (<= 16) query rows = tile_tokens consecutive tokens of one
//    sequence x head_chunk query heads that share one kv head (GQA), and one split of the key positions. Every
//    K/V row it stages is used by all rows of the tile: a decode token reads the cache once for its whole GQA
//    group, a prefill chunk once per tile of tokens.
//  - Keys are processed in tiles of kt positions staged in shared memory (block table lookups clamped):
//    scores (q.k * scale, softcap, causal + window masks) -> online softmax per row (running max and sum) ->
//    P.V into per-thread accumulators (threads split head dims in groups of 4 and key positions).
//  - Split-K (flash-decoding): the key range [0, max_blocks * block_size) is cut into n_splits pieces so that
//    even one long sequence fills the GPU; each split writes (max, sum, unnormalized acc) per row and
//    paged_merge_kernel combines them. With one split the kernel writes the output directly. Batch-invariant
//    mode (batch_invariant.h) never splits.
// Grid sizes come only from shapes (Nq, B, max_blocks, heads), never from device data, so the launches can be
// captured in a graph and replayed with new seq_info / block_tables contents. Device index tensors are not
// validated by the front-end: every index read from them is clamped, so bad contents cannot fault.
#include <algorithm>
#include <cmath>

#include "backends/common/attention_math.h"
#include "backends/common/batch_invariant.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/paged_common.cuh"
#include "backends/gpu/kernels/paged_decode_vec.h"
#include "backends/gpu/kernels/paged_flash.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxRows = 16;
constexpr size_t kSmemLimit = 48 * 1024;  // no opt-in needed above this on either vendor

// The shared launch parameters (paged_common.cuh) and this kernel's own.
struct PagedParams : PagedLaunch {
  int d;
  int rows;        // tile_tokens * head_chunk
  int kt;          // keys per tile
  bool vec_cache;  // 4-element vector loads of cache rows
};

// Shared-memory layout of the attention kernel (offsets in bytes, each 16-byte aligned).
struct SmemLayout {
  int dq;       // Q row stride in floats: d rounded up to 4
  int dp;       // K / V tile row stride in elements: dq + 4 (keeps 4-element reads off the same banks)
  int rows4;    // rows rounded up to 4
  int q_off, s_off, p_off, state_off, union_off;
  int union_bytes, total;
};
RBEE_HOST_DEVICE inline int align16(int b) { return (b + 15) / 16 * 16; }
RBEE_HOST_DEVICE inline SmemLayout smem_layout(int d, int rows, int kt, int elem_bytes, int threads) {
  SmemLayout l;
  l.dq = (d + 3) / 4 * 4;
  l.dp = l.dq + 4;
  l.rows4 = (rows + 3) / 4 * 4;
  l.q_off = 0;
  l.s_off = l.q_off + align16(rows * l.dq * 4);       // scores [rows][kt]
  l.p_off = l.s_off + align16(rows * kt * 4);         // probabilities [kt][rows4]
  l.state_off = l.p_off + align16(kt * l.rows4 * 4);  // max, sum, correction [3][rows4]
  l.union_off = l.state_off + align16(3 * l.rows4 * 4);
  // K and V tiles, later reused for the cross-group reduction (at least one row: groups * dq floats).
  const int groups = threads / (l.dq / 4);
  const int tiles_bytes = 2 * kt * l.dp * elem_bytes, reduce_bytes = groups * l.dq * 4;
  l.union_bytes = align16(tiles_bytes > reduce_bytes ? tiles_bytes : reduce_bytes);
  l.total = l.union_off + l.union_bytes;
  return l;
}

// 4 cache elements as floats (from shared or global memory, 8- or 16-byte aligned).
template <class C>
__device__ __forceinline__ float4 load4(const C* p) {
  if constexpr (std::is_same_v<C, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    float4 f;
    if constexpr (std::is_same_v<C, bf16_t>) {
      f.x = bf16_to_float((uint16_t)(v.x & 0xFFFFu));
      f.y = bf16_to_float((uint16_t)(v.x >> 16));
      f.z = bf16_to_float((uint16_t)(v.y & 0xFFFFu));
      f.w = bf16_to_float((uint16_t)(v.y >> 16));
    } else {
      f.x = f16_to_float((uint16_t)(v.x & 0xFFFFu));
      f.y = f16_to_float((uint16_t)(v.x >> 16));
      f.z = f16_to_float((uint16_t)(v.y & 0xFFFFu));
      f.w = f16_to_float((uint16_t)(v.y >> 16));
    }
    return f;
  }
}
// x rounded to the cache's type (16-bit caches), unchanged for f32 caches.
template <class C>
__device__ __forceinline__ float round_to_cache(float x) {
  if constexpr (std::is_same_v<C, bf16_t>) return bf16_to_float(float_to_bf16(x));
  else if constexpr (std::is_same_v<C, f16_t>) return f16_to_float(float_to_f16(x));
  else return x;
}
template <class C>
__device__ __forceinline__ void copy4(const C* src, C* dst) {
  if constexpr (std::is_same_v<C, float>) *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
  else *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
}

template <class C>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(PagedParams p) {
  extern __shared__ float4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw);
  const SmemLayout L = smem_layout(p.d, p.rows, p.kt, (int)sizeof(C), kThreads);
  float* qs = reinterpret_cast<float*>(smem + L.q_off);
  float* sc = reinterpret_cast<float*>(smem + L.s_off);
  float* pr = reinterpret_cast<float*>(smem + L.p_off);
  float* row_max = reinterpret_cast<float*>(smem + L.state_off);
  float* row_sum = row_max + L.rows4;
  float* row_corr = row_sum + L.rows4;
  C* kt_tile = reinterpret_cast<C*>(smem + L.union_off);
  C* vt_tile = kt_tile + p.kt * L.dp;
  float* red = reinterpret_cast<float*>(smem + L.union_off);
  const int tid = threadIdx.x;

  // ---- which tile of which sequence (uniform over the block) ----
  int q_start = 0, q_len = 0, ctx = 0, tok0 = 0;  // tok0: first token of the tile within the sequence
  const int seq = find_tile(p.seqs, p.tile_tokens, blockIdx.x, q_start, q_len, ctx, tok0);
  if (seq < 0) return;
  const int ntok = min(p.tile_tokens, q_len - tok0);
  const int pos0 = ctx - q_len + tok0;                      // position of the tile's first query
  const int g = blockIdx.y / p.n_head_chunks;               // kv head
  const int h0 = g * p.group + (blockIdx.y % p.n_head_chunks) * p.head_chunk;  // first query head
  const int nheads = min(p.head_chunk, (g + 1) * p.group - h0);
  const int split = blockIdx.z;
  const int key_lo = tile_key_lo(p, pos0, split);
  const int key_hi = min(pos0 + ntok, (split + 1) * p.split_len);  // exclusive
  const int rows = p.rows, d = p.d;
  // Row r of the tile: token r / head_chunk, head h0 + r % head_chunk.
  auto row_valid = [&](int r) { return r / p.head_chunk < ntok && r % p.head_chunk < nheads; };

  // ---- queries (rounded to a 16-bit cache's type, then pre-scaled), row state ----
  for (int e = tid; e < rows * L.dq; e += kThreads) {
    const int r = e / L.dq, i = e % L.dq;
    float v = 0.f;
    if (row_valid(r) && i < d) {
      const int64_t t = q_start + tok0 + r / p.head_chunk, h = h0 + r % p.head_chunk;
      v = round_to_cache<C>(p.q[t * p.q_s0 + h * p.q_s1 + i]) * p.scale;
    }
    qs[e] = v;
  }
  if (tid < rows) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.f;
  }

  // Thread roles. Scores: key j = tid % kt for rows tid / kt, tid / kt + kThreads / kt, ...
  // P.V: head dims 4c .. 4c + 3 (c = tid % nc) of every row for keys kg, kg + groups, ... (kg = tid / nc).
  const int nc = L.dq / 4, groups = kThreads / nc;
  const int c = tid % nc, kg = tid / nc;
  float4 acc[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);

  const C* kc = static_cast<const C*>(p.k_cache);
  const C* vc = static_cast<const C*>(p.v_cache);
  const int32_t* seq_table = p.tables + (int64_t)seq * p.max_blocks;

  for (int k0 = key_lo; k0 < key_hi; k0 += p.kt) {
    const int kn = min(p.kt, key_hi - k0);
    __syncthreads();  // previous tile fully consumed (and Q / state written before the first one)
    // ---- stage K and V rows of positions k0 .. k0 + kn ----
    const int units = L.dq / 4;
    for (int e = tid; e < kn * units; e += kThreads) {
      const int j = e / units, u = e % units, pos = k0 + j;
      const int blk = min(max(seq_table[pos / p.block_size], 0), p.num_blocks - 1);
      const int64_t row = ((int64_t)blk * p.block_size + pos % p.block_size) * p.hkv + g;
      const C* ks = kc + row * d + 4 * u;
      const C* vs = vc + row * d + 4 * u;
      C* kd = kt_tile + j * L.dp + 4 * u;
      C* vd = vt_tile + j * L.dp + 4 * u;
      if (p.vec_cache) {
        copy4(ks, kd);
        copy4(vs, vd);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool in = 4 * u + i < d;  // pad dims read as zero
          if constexpr (std::is_same_v<C, float>) {
            kd[i] = in ? ks[i] : 0.f;
            vd[i] = in ? vs[i] : 0.f;
          } else {
            kd[i].bits = in ? ks[i].bits : (uint16_t)0;
            vd[i].bits = in ? vs[i].bits : (uint16_t)0;
          }
        }
      }
    }
    __syncthreads();
    // ---- scores ----
    {
      const int j = tid % p.kt;
      if (j < kn) {
        const int key = k0 + j;
        for (int r = tid / p.kt; r < rows; r += kThreads / p.kt) {
          float s = -INFINITY;
          const int qpos = pos0 + r / p.head_chunk;
          const bool visible = row_valid(r) && key <= qpos && (p.window <= 0 || qpos - key < p.window);
          if (visible) {
            const float* qr = qs + r * L.dq;
            const C* kr = kt_tile + j * L.dp;
            float dot = 0.f;
            for (int i = 0; i < L.dq; i += 4) {
              const float4 qv = *reinterpret_cast<const float4*>(qr + i);
              const float4 kv = load4(kr + i);
              dot += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
            }
            s = attention::soft_cap(dot, p.softcap);
          }
          sc[r * p.kt + j] = s;
        }
      }
    }
    __syncthreads();
    // ---- online softmax: one warp per row ----
    // Every warp runs the same number of rounds (idle warps take part in the shuffles with empty rows), so the
    // shuffles stay uniform over the block, as the CPU emulator's block-wide exchanges require.
    {
      constexpr int W = RBEE_DEVICE_WARP_SIZE;
      const int lane = tid % W, warp = tid / W;
      for (int r0 = 0; r0 < rows; r0 += kThreads / W) {
        const int r = r0 + warp;
        const bool active = r < rows;
        const int n = active ? kn : 0;
        float tmax = -INFINITY;
        for (int j = lane; j < n; j += W) tmax = fmaxf(tmax, sc[r * p.kt + j]);
        tmax = warp_max(tmax);
        const float old_max = active ? row_max[r] : -INFINITY;
        const float new_max = fmaxf(old_max, tmax);
        const bool none = new_max == -INFINITY;  // no visible key so far: keep zeros
        float sum = 0.f;
        for (int j = lane; j < n; j += W) {
          const float e = none ? 0.f : expf(sc[r * p.kt + j] - new_max);
          pr[j * L.rows4 + r] = round_to_cache<C>(e);  // P.V takes P in the cache's type; the sum does not
          sum += e;
        }
        sum = warp_sum(sum);
        // Every lane read row_max[r] (old_max) above; lane 0 overwrites it below. The shuffles already order the
        // two, but only a warp barrier says so to the memory model (and to compute-sanitizer's racecheck, which
        // reported the pair as a write-after-read hazard). All threads of the block reach it (uniform rounds).
        warp_sync();
        if (active && lane == 0) {
          const float corr = none ? 1.f : expf(old_max - new_max);
          row_corr[r] = corr;
          row_sum[r] = row_sum[r] * corr + sum;
          row_max[r] = new_max;
        }
      }
    }
    __syncthreads();
    // ---- acc = acc * corr + P.V ----
    if (kg < groups) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r < rows) {
          const float cr = row_corr[r];
          acc[r].x *= cr, acc[r].y *= cr, acc[r].z *= cr, acc[r].w *= cr;
        }
      }
      for (int j = kg; j < kn; j += groups) {
        const float4 v = load4(vt_tile + j * L.dp + 4 * c);
        const float* pj = pr + j * L.rows4;
#pragma unroll
        for (int r4 = 0; r4 < kMaxRows; r4 += 4) {
          if (r4 < rows) {
            const float4 w = *reinterpret_cast<const float4*>(pj + r4);
            const float wr[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              acc[r4 + i].x += wr[i] * v.x;
              acc[r4 + i].y += wr[i] * v.y;
              acc[r4 + i].z += wr[i] * v.z;
              acc[r4 + i].w += wr[i] * v.w;
            }
          }
        }
      }
    }
  }

  // ---- sum the key groups' accumulators and write, a chunk of rows at a time ----
  const int chunk_rows = max(1, (L.union_bytes / 4) / (groups * L.dq));
  for (int r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int r1 = min(rows, r0 + chunk_rows);
    __syncthreads();  // union region free (last tile consumed / previous chunk read)
    if (kg < groups) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r >= r0 && r < r1) {
          *reinterpret_cast<float4*>(red + ((int64_t)kg * chunk_rows + (r - r0)) * L.dq + 4 * c) = acc[r];
        }
      }
    }
    __syncthreads();
    for (int e = tid; e < (r1 - r0) * d; e += kThreads) {
      const int rr = e / d, i = e % d, r = r0 + rr;
      if (!row_valid(r)) continue;
      float sum = 0.f;
      for (int gg = 0; gg < groups; ++gg) sum += red[((int64_t)gg * chunk_rows + rr) * L.dq + i];
      const int64_t t = q_start + tok0 + r / p.head_chunk, h = h0 + r % p.head_chunk;
      const int64_t o = (t * p.hq + h) * d + i;
      if (p.n_splits == 1) {
        const float l = row_sum[r];
        p.out[o] = l > 0.f ? sum / l : 0.f;
      } else {
        p.part_acc[(int64_t)split * p.seqs.nq * p.hq * d + o] = sum;
      }
    }
  }
  if (p.n_splits > 1 && tid < rows && row_valid(tid)) {
    const int64_t t = q_start + tok0 + tid / p.head_chunk, h = h0 + tid % p.head_chunk;
    float* ml = p.part_ml + (((int64_t)split * p.seqs.nq + t) * p.hq + h) * 2;
    ml[0] = row_max[tid];
    ml[1] = row_sum[tid];
  }
}

// out[t, h, :] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the splits, for tokens of a sequence.
// Grid (nq, hq); tokens outside every sequence are left untouched.
__global__ void __launch_bounds__(kThreads) paged_merge_kernel(PagedMergeParams p) {
  const int t = blockIdx.x, h = blockIdx.y;
  bool covered = false;
  for (int i = 0; i < p.seqs.n_seq && !covered; ++i) {
    int qs, ql, cx;
    read_seq(p.seqs, i, qs, ql, cx);
    covered = t >= qs && t < qs + ql;
  }
  if (!covered) return;
  const int64_t stride = (int64_t)p.seqs.nq * p.hq;
  const float* ml = p.part_ml + ((int64_t)t * p.hq + h) * 2;
  float m = -INFINITY;
  for (int s = 0; s < p.n_splits; ++s) m = fmaxf(m, ml[s * stride * 2]);
  float l = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < p.n_splits; ++s) l += expf(ml[s * stride * 2] - m) * ml[s * stride * 2 + 1];
  }
  const float* acc = p.part_acc + ((int64_t)t * p.hq + h) * p.d;
  float* out = p.out + ((int64_t)t * p.hq + h) * p.d;
  for (int i = threadIdx.x; i < p.d; i += blockDim.x) {
    float sum = 0.f;
    if (l > 0.f) {
      for (int s = 0; s < p.n_splits; ++s) {
        const float ms = ml[s * stride * 2];
        if (ms != -INFINITY) sum += expf(ms - m) * acc[s * stride * p.d + i];
      }
      sum /= l;
    }
    out[i] = sum;
  }
}

template <class I, class O>
__global__ void kv_cache_write_kernel(const I* __restrict__ k, int64_t k_s0, int64_t k_s1, const I* __restrict__ v,
                                      int64_t v_s0, int64_t v_s1, const int32_t* __restrict__ slots, O* __restrict__ kc,
                                      O* __restrict__ vc, int64_t n, int hkv, int d, int64_t capacity) {
  const int64_t total = n * hkv * d;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / ((int64_t)hkv * d);
    const int h = (int)(e / d % hkv), i = (int)(e % d);
    const int64_t slot = slots[row];
    if (slot < 0 || slot >= capacity) continue;  // the front-end checks host slots only
    const int64_t dst = (slot * hkv + h) * d + i;
    store(kc + dst, (compute_t<O>)load_f32(k + row * k_s0 + h * k_s1 + i));
    store(vc + dst, (compute_t<O>)load_f32(v + row * v_s0 + h * v_s1 + i));
  }
}

}  // namespace

void launch_paged_merge(GpuDevice& dev, const PagedMergeParams& p) {
  paged_merge_kernel<<<dim3((unsigned)p.seqs.nq, (unsigned)p.hq), kThreads, 0, dev.stream()>>>(p);
  RBEE_GPU_CHECK_LAUNCH();
}

void GpuKernels::kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                                Tensor& v_cache) {
  device_.activate();
  const int64_t n = k.dim(0), hkv = k.dim(1), d = k.dim(2);
  if (n * hkv * d == 0) return;
  const int64_t capacity = k_cache.dim(0) * k_cache.dim(1);
  visit_float_storage(k.dtype(), [&](auto in_tag) {
    using I = decltype(in_tag);
    visit_float_storage(k_cache.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      if constexpr (std::is_same_v<I, double> || std::is_same_v<O, double>) {
        RBEE_THROW(ErrorCode::Unsupported, "kv_cache_write: f64 is not supported on {}", RBEE_GPU_BACKEND_NAME);
      } else {
        constexpr int kWriteThreads = 256;
        kv_cache_write_kernel<I, O><<<grid_for(n * hkv * d, kWriteThreads), kWriteThreads, 0, device_.stream()>>>(
            static_cast<const I*>(k.data()), k.stride(0), k.stride(1), static_cast<const I*>(v.data()), v.stride(0),
            v.stride(1), static_cast<const int32_t*>(slots.data()), static_cast<O*>(k_cache.data()),
            static_cast<O*>(v_cache.data()), n, (int)hkv, (int)d, capacity);
        RBEE_GPU_CHECK_LAUNCH();
      }
    });
  });
}

void GpuKernels::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                 Tensor& out) {
  device_.activate();
  const int nq = (int)q.dim(0), hq = (int)q.dim(1), d = (int)q.dim(2);
  const int n_seq = (int)seq_info.dim(0), max_blocks = (int)block_tables.dim(1);
  const int num_blocks = (int)k_cache.dim(0), block_size = (int)k_cache.dim(1), hkv = (int)k_cache.dim(2);
  if (nq == 0 || n_seq == 0 || max_blocks == 0 || num_blocks == 0 || hq == 0 || d == 0) return;
  if (paged_attention_decode_vec(device_, q, k_cache, v_cache, seq_info, block_tables, params, out)) return;
  if (paged_attention_flash(device_, q, k_cache, v_cache, seq_info, block_tables, params, out)) return;
  const int elem = (int)dtype_info(k_cache.dtype()).type_size;

  // Tile shape: the most rows (then the longest key tiles) whose shared memory fits without opt-in.
  static constexpr int kShapes[][2] = {{16, 64}, {16, 32}, {8, 64}, {8, 32}, {16, 16}, {8, 16},
                                       {4, 32},  {4, 16},  {4, 8},  {2, 8},  {1, 8}};
  int rows_max = 0, kt = 0;
  for (const auto& s : kShapes) {
    if ((size_t)smem_layout(d, s[0], s[1], elem, kThreads).total <= kSmemLimit && (d + 3) / 4 <= kThreads) {
      rows_max = s[0];
      kt = s[1];
      break;
    }
  }
  RBEE_CHECK_CODE(rows_max > 0, ErrorCode::Unsupported,
                  "paged_attention: head size {} does not fit the {} kernel's shared memory", d, RBEE_GPU_BACKEND_NAME);

  PagedParams p{};
  const int64_t tiles = fill_paged_launch(p, q, k_cache, v_cache, seq_info, block_tables, params, rows_max);
  p.d = d;
  p.rows = p.tile_tokens * p.head_chunk;
  p.kt = kt;
  p.vec_cache = d % 4 == 0 && reinterpret_cast<uintptr_t>(k_cache.data()) % (4 * elem) == 0 &&
                reinterpret_cast<uintptr_t>(v_cache.data()) % (4 * elem) == 0;

  // Splits: enough blocks for ~4 per multiprocessor, each split at least one key tile, also for short ranges.
  // Batch-invariant mode: one split (a row's keys in one pass of kt-key tiles from position 0, whatever the
  // launch) and window starts aligned to the tiles.
  const bool invariant = batch_invariant();
  if (invariant) p.key_align = kt;
  PagedPartials partials;
  plan_paged_splits(p, device_, (int64_t)max_blocks * block_size, kt, tiles * hkv * p.n_head_chunks,
                    4 * (int64_t)device_.props().multiprocessors, 0, invariant, out, partials);
  RBEE_CHECK_CODE(tiles <= INT32_MAX && (int64_t)hkv * p.n_head_chunks <= 65535, ErrorCode::Unsupported,
                  "paged_attention: launch too large ({} tiles, {} kv heads)", tiles, hkv);

  const dim3 grid((unsigned)tiles, (unsigned)(hkv * p.n_head_chunks), (unsigned)p.n_splits);
  const size_t smem = (size_t)smem_layout(d, p.rows, kt, elem, kThreads).total;
  visit_float_storage(k_cache.dtype(), [&](auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_same_v<C, double>) {
      RBEE_THROW(ErrorCode::Unsupported, "paged_attention: f64 caches are not supported on {}", RBEE_GPU_BACKEND_NAME);
    } else {
      paged_attention_kernel<C><<<grid, kThreads, smem, device_.stream()>>>(p);
      RBEE_GPU_CHECK_LAUNCH();
    }
  });
  merge_paged_splits(device_, p, d);
}

}  // namespace rbee::gpu
