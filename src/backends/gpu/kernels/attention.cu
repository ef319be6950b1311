// GPU dense attention, flash style: out = softmax(mask(softcap(q k^T * scale))) v without the Tq x Tk score
// matrix, with the CPU's semantics (cpu_attention.cpp).
//
// Rows: for one (batch, kv head) the rows are the (query i, head g of the kv head's group) pairs, query-major
// (r = i * group + g), so grouped-query heads share every key and value tile. A block takes BQ consecutive rows
// (kThreadsPerRow threads each) and walks the keys they may see in tiles of BK keys held in shared memory with
// the block's (scaled) queries (large head dims go through shared memory in chunks, their partial dot products
// summed in registers): scores for its keys, then the online-softmax update (running max m and sum l
// per row, the output rescaled by exp(m_old - m_new)), then the probability-weighted values added to the row's
// output, which stays in registers (each thread owns every kThreadsPerRow-th output column).
// Masking per row: query i sits at position p = Tk - Tq + i; causal keeps keys <= p, a window keeps keys
// > p - window; tiles outside every row's range are never visited. A row that sees no key gets zeros.
// When there are too few (batch, kv head, row tile) items to fill the GPU (decode), the key range is split
// across blocks that keep partial (m, l, O), merged afterwards as O = sum_s e^(m_s - M) O_s / sum_s e^(m_s - M) l_s.
// f16/bf16/f32 compute in f32, f64 in f64. Unmasked 16-bit attention of 16 queries or more takes the tensor-core
// flash kernel (attention_flash.cu), else long unmasked 16-bit sequences the vendor Blas (attention_gemm.cu).
#include <cmath>
#include <iterator>
#include <type_traits>

#include "backends/common/attention_math.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/attention_dnn.h"
#include "backends/gpu/kernels/attention_flash.h"
#include "backends/gpu/kernels/attention_gemm.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreadsPerRow = 8;
constexpr int kMaxKeysPerThread = 4;              // BK <= 32
constexpr size_t kAttnSmemBytes = 48 << 10;       // the portable per-block limit
constexpr int kMinKeysPerSplit = 256;

// The call's sizes (attention_math.h) and the kernels' tiling.
struct AttnGeometry : attention::AttentionShape {
  int bq, bk;          // rows per block, keys per tile
  int64_t dc;          // head dims of q and k held in shared memory at once
  int64_t row_tiles;   // ceil(rows / bq)
  int64_t items;       // batch * kv_heads * row_tiles
  int64_t splits;      // key-range splits per item
  int64_t qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2;  // element strides of q, k, v [B, H, T, *]
  int64_t os0, os1, os2;                                // element strides of out [B, Hq, Tq, Dv] (last one 1)
  float scale, softcap;
  bool causal;
  int window;
};

// Keys [lo, hi) that query i may see.
__device__ inline void visible_keys(const AttnGeometry& g, int64_t i, int64_t& lo, int64_t& hi) {
  attention::visible_keys(g.tq, g.tk, g.causal, g.window, i, lo, hi);
}

template <class C>
__device__ inline C row_max(C v) {
  for (int mask = kThreadsPerRow / 2; mask > 0; mask >>= 1) {
    const C o = shfl_xor(v, mask, kThreadsPerRow);
    v = o > v ? o : v;
  }
  return v;
}
template <class C>
__device__ inline C row_sum(C v) {
  for (int mask = kThreadsPerRow / 2; mask > 0; mask >>= 1) v += shfl_xor(v, mask, kThreadsPerRow);
  return v;
}

// dst[j * dst_stride + d] = j < valid ? src[j * src_stride + d] * mul : 0 for j < n, d < width, moved in vectors
// of V elements (V divides width and src_stride; src 16-byte aligned when V > 1).
template <class T, int V>
__device__ inline void load_tile(compute_t<T>* dst, int64_t dst_stride, const T* src, int64_t src_stride,
                                 int64_t valid, int64_t n, int64_t width, compute_t<T> mul) {
  using C = compute_t<T>;
  const int64_t wv = width / V;
  for (int64_t e = threadIdx.x; e < n * wv; e += blockDim.x) {
    const int64_t j = e / wv, d = e % wv * V;
    C t[V];
    if (j < valid) {
      load_vec<T, V>(src + j * src_stride + d, t);
    } else {
#pragma unroll
      for (int u = 0; u < V; ++u) t[u] = 0;
    }
#pragma unroll
    for (int u = 0; u < V; ++u) dst[j * dst_stride + d + u] = t[u] * mul;
  }
}

// One block per (item, split). kO: output columns each thread may own (>= ceil(dim_v / kThreadsPerRow)).
// V: elements per global load (16 bytes of T when dim, dim_v, dc and every q/k/v stride are multiples of it and
// the tensors 16-byte aligned, else 1).
// Shared memory: the queries and keys of one tile, `dc` head dims at a time (one chunk when dc >= dim), the
// tile's values and the probabilities. part_ml [items * splits * bq * 2], part_o [items * splits * bq * dim_v]:
// partial states (splits > 1 only).
template <class T, int kO, int V>
__global__ void attention_kernel(const T* q, const T* k, const T* v, AttnGeometry g, T* out, compute_t<T>* part_ml,
                                 compute_t<T>* part_o) {
  using C = compute_t<T>;
  const int64_t dim = g.dim, dim_v = g.dim_v, dc = g.dc;
  const int bq = g.bq, bk = g.bk;
  C* qs = dynamic_smem<C>();         // [bq][dc + 1]
  C* ks = qs + bq * (dc + 1);        // [bk][dc + 1]
  C* vs = ks + bk * (dc + 1);        // [bk][dim_v]
  C* ps = vs + bk * dim_v;           // [bq][bk + 1]
  const int r = threadIdx.x / kThreadsPerRow, lane = threadIdx.x % kThreadsPerRow;
  const C neg_inf = -(C)INFINITY;
  const bool one_chunk = dc >= dim;
  const int64_t chunks = one_chunk ? 1 : ceil_div(dim, dc);
  const int keys_per_thread = bk / kThreadsPerRow;

  for (int64_t work = blockIdx.x; work < g.items * g.splits; work += gridDim.x) {
    const int64_t item = work / g.splits, split = work % g.splits;
    const int64_t per_batch = g.kv_heads * g.row_tiles;
    const int64_t b = item / per_batch, kvh = item % per_batch / g.row_tiles, tile = item % g.row_tiles;
    const int64_t row0 = tile * bq, row_end = row0 + bq < g.rows ? row0 + bq : g.rows;
    const int64_t gr = row0 + r;
    const bool active = gr < g.rows;
    const int64_t qi = active ? gr / g.group : 0, head = kvh * g.group + (active ? gr % g.group : 0);
    int64_t lo = 0, hi = 0;
    if (active) visible_keys(g, qi, lo, hi);

    // The block's key range: rows are query-major, so both ends grow with the row.
    int64_t begin, end, unused;
    visible_keys(g, row0 / g.group, begin, unused);
    visible_keys(g, (row_end - 1) / g.group, unused, end);
    if (g.splits > 1 && end > begin) {
      const int64_t per_split = ceil_div(ceil_div(end - begin, g.splits), bk) * bk;
      const int64_t split_begin = begin + split * per_split < end ? begin + split * per_split : end;
      end = split_begin + per_split < end ? split_begin + per_split : end;
      begin = split_begin;
    }

    // Head dims [d0, d0 + width) of the block's scaled queries.
    const T* qbase = q + b * g.qs0 + kvh * g.group * g.qs1;
    auto load_queries = [&](int64_t d0, int64_t width) {
      const int64_t wv = width / V;
      for (int64_t e = threadIdx.x; e < bq * wv; e += blockDim.x) {
        const int64_t rr = e / wv, d = e % wv * V, grr = row0 + rr;
        C t[V];
        if (grr < g.rows) {
          load_vec<T, V>(qbase + (grr % g.group) * g.qs1 + (grr / g.group) * g.qs2 + d0 + d, t);
        } else {
#pragma unroll
          for (int u = 0; u < V; ++u) t[u] = 0;
        }
#pragma unroll
        for (int u = 0; u < V; ++u) qs[rr * (dc + 1) + d + u] = t[u] * (C)g.scale;
      }
    };
    if (one_chunk) load_queries(0, dim);

    C m = neg_inf, l = 0;
    C o[kO];
#pragma unroll
    for (int u = 0; u < kO; ++u) o[u] = 0;

    const T* kbase = k + b * g.ks0 + kvh * g.ks1;
    const T* vbase = v + b * g.vs0 + kvh * g.vs1;
    for (int64_t kb = begin; kb < end; kb += bk) {
      // Scores of this thread's keys j = lane + kThreadsPerRow * u, summed over the head-dim chunks.
      bool visible[kMaxKeysPerThread];
      C s[kMaxKeysPerThread];
#pragma unroll
      for (int u = 0; u < kMaxKeysPerThread; ++u) {
        const int64_t key = kb + lane + kThreadsPerRow * u;
        visible[u] = u < keys_per_thread && active && key >= lo && key < hi && key < end;
        s[u] = 0;
      }
      // At least one pass, so the values are loaded and the barriers met even for head dim 0.
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t d0 = chunk * dc, width = dim - d0 < dc ? dim - d0 : dc;
        __syncthreads();  // the previous readers of these buffers are done (and the queries are stored)
        if (!one_chunk) load_queries(d0, width);
        load_tile<T, V>(ks, dc + 1, kbase + kb * g.ks2 + d0, g.ks2, end - kb, bk, width, C(1));
        if (chunk == 0) load_tile<T, V>(vs, dim_v, vbase + kb * g.vs2, g.vs2, end - kb, bk, dim_v, C(1));
        __syncthreads();
        const C* qr = qs + r * (dc + 1);
#pragma unroll
        for (int u = 0; u < kMaxKeysPerThread; ++u) {
          if (!visible[u]) continue;
          const C* kr = ks + (lane + kThreadsPerRow * u) * (dc + 1);
          C dot = 0;
          for (int64_t d = 0; d < width; ++d) dot += qr[d] * kr[d];
          s[u] += dot;
        }
      }

      C tile_max = neg_inf;
#pragma unroll
      for (int u = 0; u < kMaxKeysPerThread; ++u) {
        if (!visible[u]) {
          s[u] = neg_inf;
          continue;
        }
        s[u] = attention::soft_cap(s[u], (C)g.softcap);
        tile_max = s[u] > tile_max ? s[u] : tile_max;
      }
      const C m_new_raw = row_max(tile_max);
      const C m_new = m_new_raw > m ? m_new_raw : m;
      // alpha rescales what the row accumulated so far; a row that has seen nothing keeps alpha = 1, p = 0.
      const C alpha = m_new == neg_inf ? C(1) : exp_c(m - m_new);
      C psum = 0;
#pragma unroll
      for (int u = 0; u < kMaxKeysPerThread; ++u) {
        if (u >= keys_per_thread) continue;
        const C p = visible[u] ? exp_c(s[u] - m_new) : C(0);
        ps[r * (bk + 1) + lane + kThreadsPerRow * u] = p;
        psum += p;
      }
      l = l * alpha + row_sum(psum);
      m = m_new;
      __syncthreads();

#pragma unroll
      for (int u = 0; u < kO; ++u) {
        const int64_t c = lane + kThreadsPerRow * u;
        if (c >= dim_v) continue;
        C acc = o[u] * alpha;
        const C* pr = ps + r * (bk + 1);
        for (int j = 0; j < bk; ++j) acc += pr[j] * vs[j * dim_v + c];
        o[u] = acc;
      }
    }

    if (active) {
      if (g.splits == 1) {
        T* dst = out + b * g.os0 + head * g.os1 + qi * g.os2;
        const C inv = l > 0 ? C(1) / l : C(0);
#pragma unroll
        for (int u = 0; u < kO; ++u) {
          const int64_t c = lane + kThreadsPerRow * u;
          if (c < dim_v) store(dst + c, o[u] * inv);
        }
      } else {
        const int64_t slot = work * bq + r;
        if (lane == 0) {
          part_ml[2 * slot] = m;
          part_ml[2 * slot + 1] = l;
        }
#pragma unroll
        for (int u = 0; u < kO; ++u) {
          const int64_t c = lane + kThreadsPerRow * u;
          if (c < dim_v) part_o[slot * dim_v + c] = o[u];
        }
      }
    }
    __syncthreads();  // shared memory is reused by the next work item
  }
}

// Merges the splits of every (item, row, column).
template <class T>
__global__ void attention_merge_kernel(const compute_t<T>* part_ml, const compute_t<T>* part_o, AttnGeometry g,
                                       T* out) {
  using C = compute_t<T>;
  const int64_t total = g.items * g.bq * g.dim_v;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = e % g.dim_v, r = e / g.dim_v % g.bq, item = e / (g.dim_v * g.bq);
    const int64_t tile = item % g.row_tiles, gr = tile * g.bq + r;
    if (gr >= g.rows) continue;
    const int64_t per_batch = g.kv_heads * g.row_tiles;
    const int64_t b = item / per_batch, kvh = item % per_batch / g.row_tiles;
    const int64_t qi = gr / g.group, head = kvh * g.group + gr % g.group;
    auto slot = [&](int64_t split) { return (item * g.splits + split) * g.bq + r; };
    C max = -(C)INFINITY;
    for (int64_t sp = 0; sp < g.splits; ++sp) max = part_ml[2 * slot(sp)] > max ? part_ml[2 * slot(sp)] : max;
    C l = 0, acc = 0;
    if (max != -(C)INFINITY) {
      for (int64_t sp = 0; sp < g.splits; ++sp) {
        const C w = exp_c(part_ml[2 * slot(sp)] - max);  // 0 for a split that saw no key
        if (w == 0) continue;
        l += w * part_ml[2 * slot(sp) + 1];
        acc += w * part_o[slot(sp) * g.dim_v + c];
      }
    }
    store(out + b * g.os0 + head * g.os1 + qi * g.os2 + c, l > 0 ? acc / l : C(0));
  }
}

template <class T>
size_t attention_smem(int64_t dc, int64_t dim_v, int bq, int bk) {
  return (size_t)(bq * (dc + 1) + bk * (dc + 1) + bk * dim_v + bq * (bk + 1)) * sizeof(compute_t<T>);
}

template <class T, int kO, int V>
void launch_attention(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttnGeometry& g,
                      size_t smem, Tensor& out) {
  using C = compute_t<T>;
  const int threads = g.bq * kThreadsPerRow;
  Tensor part_ml, part_o;
  C* ml = nullptr;
  C* po = nullptr;
  const DType acc_dtype = std::is_same_v<C, double> ? DType::F64 : DType::F32;
  if (g.splits > 1) {
    part_ml = Tensor::empty({g.items * g.splits * g.bq * 2}, acc_dtype, dev);
    part_o = Tensor::empty({g.items * g.splits * g.bq * g.dim_v}, acc_dtype, dev);
    ml = static_cast<C*>(part_ml.data());
    po = static_cast<C*>(part_o.data());
  }
  attention_kernel<T, kO, V><<<blocks_for(g.items * g.splits, 1), threads, smem, dev.stream()>>>(
      static_cast<const T*>(q.data()), static_cast<const T*>(k.data()), static_cast<const T*>(v.data()), g,
      static_cast<T*>(out.data()), ml, po);
  RBEE_GPU_CHECK_LAUNCH();
  if (g.splits > 1) {
    attention_merge_kernel<T><<<grid_for(g.items * g.bq * g.dim_v, 256), 256, 0, dev.stream()>>>(
        ml, po, g, static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  }
}

}  // namespace

void GpuKernels::attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                           Tensor& out) {
  device_.activate();
  AttnGeometry g{};
  static_cast<attention::AttentionShape&>(g) = attention::attention_shape(q, k, v);
  if (g.batch == 0 || g.rows == 0 || g.dim_v == 0) return;
  // Unmasked 16-bit attention of 16 queries or more: tensor-core flash attention (attention_flash.cu); else, or
  // with RBEE_ATTN_FLASH=0, long unmasked 16-bit sequences take tensor-core GEMMs through the vendor Blas
  // (attention_gemm.cu).
  if (attention_dnn(device_, q, k, v, params, out)) return;
  if (attention_flash(device_, q, k, v, params, out)) return;
  if (attention_gemm(device_, q, k, v, params, out)) return;
  g.qs0 = q.stride(0), g.qs1 = q.stride(1), g.qs2 = q.stride(2);
  g.ks0 = k.stride(0), g.ks1 = k.stride(1), g.ks2 = k.stride(2);
  g.vs0 = v.stride(0), g.vs1 = v.stride(1), g.vs2 = v.stride(2);
  g.os0 = out.stride(0), g.os1 = out.stride(1), g.os2 = out.stride(2);
  g.scale = params.scale;
  g.softcap = params.softcap;
  g.causal = params.causal;
  g.window = params.window;

  visit_float_storage(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The largest tiles whose shared memory fits the portable limit, with all head dims of q and k at once if
    // possible, else in chunks. Blocks of 8 rows when there are no more (decode: one query per head of the
    // group), so fewer threads idle.
    constexpr int kTiles[][2] = {{16, 32}, {16, 16}, {8, 16}, {8, 8}};
    constexpr int kSmallTiles[][2] = {{8, 32}, {8, 16}, {8, 8}, {8, 8}};
    static_assert(std::size(kTiles) == std::size(kSmallTiles));
    const int(*tiles)[2] = g.rows <= 8 ? kSmallTiles : kTiles;
    size_t smem = 0;
    for (size_t ti = 0; ti < std::size(kTiles); ++ti) {
      const int* t = tiles[ti];
      for (const int64_t dc : {g.dim, (int64_t)128, (int64_t)64, (int64_t)32}) {
        if (dc > g.dim || g.bq > 0) continue;
        smem = attention_smem<T>(dc, g.dim_v, t[0], t[1]);
        if (smem <= kAttnSmemBytes) {
          g.bq = t[0];
          g.bk = t[1];
          g.dc = dc;
        }
      }
      if (g.bq > 0) break;
    }
    RBEE_CHECK_CODE(g.bq > 0, ErrorCode::Unsupported,
                    "attention: value head dim {} needs more shared memory than the GPU kernel's tiles allow for {}",
                    g.dim_v, dtype_name(q.dtype()));
    g.row_tiles = ceil_div(g.rows, g.bq);
    g.items = g.batch * g.kv_heads * g.row_tiles;
    // Split the keys when the items alone would leave multiprocessors idle and the keys are many.
    const int64_t wanted = 2 * (int64_t)device_.props().multiprocessors;
    g.splits = 1;
    if (g.items < wanted && g.tk >= 2 * kMinKeysPerSplit) {
      g.splits = std::max<int64_t>(1, std::min(ceil_div(wanted, g.items), g.tk / kMinKeysPerSplit));
    }
    // 16-byte loads of q, k and v when every row start and chunk is a whole number of vectors.
    constexpr int kV = kVec16<T>;
    const bool vec = vec16_ok({q.data(), k.data(), v.data()},
                              {g.dim, g.dim_v, g.dc, g.qs0, g.qs1, g.qs2, g.ks0, g.ks1, g.ks2, g.vs0, g.vs1, g.vs2}, kV);
    const int64_t per_thread = ceil_div(g.dim_v, kThreadsPerRow);
    auto launch = [&](auto o_tag) {
      constexpr int kO = decltype(o_tag)::value;
      if (vec) launch_attention<T, kO, kV>(device_, q, k, v, g, smem, out);
      else launch_attention<T, kO, 1>(device_, q, k, v, g, smem, out);
    };
    if (per_thread <= 8) launch(std::integral_constant<int, 8>{});
    else if (per_thread <= 32) launch(std::integral_constant<int, 32>{});
    else if (per_thread <= 64) launch(std::integral_constant<int, 64>{});
    else RBEE_THROW(ErrorCode::Unsupported, "attention: value head dim {} exceeds the GPU kernel's {}", g.dim_v,
                    64 * kThreadsPerRow);
  });
}

}  // namespace rbee::gpu
