// Quantized matrix-vector products for decode (M <= 16 activation rows), read straight from the packed blocks.
//
// A warp owns R consecutive weight rows; its lanes stride over the rows' 32-element items (lane l takes
// items l, l + W, ...), so a warp's loads of one item index cover consecutive bytes of each row. Lanes work in
// batches of U items: the U x R items are decoded first (decode_item; its 16-byte loads are branch-free, so
// the loads of the whole batch issue back to back and the memory system sees U x R items per lane in flight),
// then for each of the M activation rows a lane loads 32 int8 levels (two 16-byte loads), forms two
// 16-element int8 dot products per weight row with dot4_i8 and adds d_x * (a * dot + b * sum_x) to its R x M
// accumulators (explicit roundings, the same in every launch shape). Every weight byte is read once per launch;
// the activations (M * K bytes) are re-read per warp from L1/L2, R times less often thanks to the R rows per warp.
// A transposed butterfly then leaves one sum per lane for the R x M outputs, plus the residual when the launch has
// one (the fused residual add).
// Before its loop a warp asks for its rows' bytes to be brought into L2 (prefetch_l2: a hint, so the DRAM
// queue fills at once rather than at the pace of the register-held loads).
#pragma once

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu::quant {

inline constexpr int kMatvecThreads = 128;

#if defined(__CUDACC__) || defined(__HIPCC__)

// Butterfly over the warp that sums each of N values across all lanes and leaves value (lane / (W / N)) in
// v[0] of lane `lane` (W = warp width; every W / N consecutive lanes hold the same one). N: power of 2, <= W.
// Costs N - 1 + log2(W / N) shuffles instead of N log2(W).
template <int N, int Off>
__device__ __forceinline__ void transpose_sum(float* v, int lane) {
  if constexpr (Off >= 1) {
    if constexpr (N > 1) {
      constexpr int H = N / 2;
      const bool upper = (lane & Off) != 0;  // upper lanes keep values [H, N), lower lanes [0, H)
#pragma unroll
      for (int i = 0; i < H; ++i) {
        const float send = upper ? v[i] : v[i + H];
        const float keep = upper ? v[i + H] : v[i];
        v[i] = keep + shfl_xor(send, Off);
      }
      transpose_sum<H, Off / 2>(v, lane);
    } else {
      v[0] += shfl_xor(v[0], Off);
      transpose_sum<1, Off / 2>(v, lane);
    }
  }
}

// Writes acc[r][m] (summed over the warp) to out[m * ldo + row0 + r] for rows < n and m < m_valid, plus
// residual[m * ldo + row0 + r] when residual is not null.
template <int M, int R>
__device__ __forceinline__ void reduce_and_store(float (&acc)[R][M], int lane, int64_t row0, int64_t n, int m_valid,
                                                 float* out, int64_t ldo, const float* residual = nullptr) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  constexpr int N = R * M;
  static_assert((N & (N - 1)) == 0 && N <= W, "R * M must be a power of two <= the warp size");
  float v[N];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) v[r * M + m] = acc[r][m];
  }
  transpose_sum<N, W / 2>(v, lane);
  constexpr int kLanesPerValue = W / N;
  if (lane % kLanesPerValue == 0) {
    const int idx = lane / kLanesPerValue, r = idx / M, m = idx % M;
    if (row0 + r < n && m < m_valid) {
      const int64_t at = m * ldo + row0 + r;
      out[at] = residual ? residual[at] + v[0] : v[0];
    }
  }
}

// One 16-element int8 dot product: q (4 words of weight levels) . 16 activation levels.
__device__ __forceinline__ int dot16(const uint32_t* q, const uint4& x) {
  int acc = dot4_i8((int)q[0], (int)x.x, 0);
  acc = dot4_i8((int)q[1], (int)x.y, acc);
  acc = dot4_i8((int)q[2], (int)x.z, acc);
  return dot4_i8((int)q[3], (int)x.w, acc);
}

// The rows [row0, row0 + rows) of w as an L2 prefetch hint (the 16-byte aligned part of the range).
__device__ __forceinline__ void prefetch_rows(const uint8_t* w, int64_t row0, int64_t rows, int64_t row_bytes) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(w + row0 * row_bytes) + 15) & ~uintptr_t(15);
  const uintptr_t end = reinterpret_cast<uintptr_t>(w + (row0 + rows) * row_bytes) & ~uintptr_t(15);
  if (end > begin) prefetch_l2(reinterpret_cast<const void*>(begin), (uint32_t)(end - begin));
}

// kPairs (Q4_K / Q5_K, U even): a lane takes items two by two, 2p and 2p + 1 of one block, decoded together
// (decode_item_pair: one header load and scale unpack for both); lanes then cover 32-byte qs pieces instead of
// 16-byte ones. Items of a lane's batch: it0 + (u / G) * W * G + u % G, G = 2 with pairs, else 1 (it0 = G * lane
// + j * W * U), so each item of a row is still taken exactly once.
template <DType T, int M, int R, int U, bool kAligned16, bool kPairs = false>
__global__ void __launch_bounds__(kMatvecThreads) quant_matvec_kernel(QmvArgs a) {
  using B = BlockTraits<T>;
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  static_assert(!kPairs || ((T == DType::Q4_K || T == DType::Q5_K) && U % 2 == 0), "pairs: Q4_K / Q5_K, U even");
  constexpr int G = kPairs ? 2 : 1;
  const int lane = threadIdx.x % W;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / W;
  // Warps past the last row run on clamped rows and store nothing (no early return: the butterfly's shuffles and
  // the emulator's block-wide exchanges need every warp).
  const int64_t row0 = warp * R;
  // Weights never depend on earlier launches: prefetch them, then wait for the activations (launch_decode_kernel).
  if (a.prefetch && lane == 0 && row0 < a.n) prefetch_rows(a.w, row0, (row0 + R <= a.n ? R : a.n - row0), a.row_bytes);
  grid_dependency_trigger();
  grid_dependency_wait();
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = a.w + (row0 + r < a.n ? row0 + r : a.n - 1) * a.row_bytes;
  const int64_t k = a.k, k32 = k / 32, k16 = k / 16;
  const int8_t* __restrict__ xq = a.x.q;
  const float* __restrict__ xd = a.x.d;
  const int32_t* __restrict__ xs = a.x.s;

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  }

  const int items = (int)k32;  // a multiple of G (K-quant rows hold 8 items per block)
  for (int it0 = G * lane; it0 < items; it0 += W * U) {
    // Decode the batch first (items past the end repeat the last group: their loads stay in bounds and
    // branch-free; they are not accumulated).
    Item wi[U][R];
#pragma unroll
    for (int u = 0; u < U; u += G) {
      const int it = min(it0 + (u / G) * W * G, items - G);
      const int blk = it / B::kItems, part = it % B::kItems;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint8_t* block = rows[r] + (int64_t)blk * B::kTS;
        if constexpr (kPairs) decode_item_pair<T, kAligned16>(block, part >> 1, wi[u][r], wi[u + 1][r]);
        else decode_item<T, kAligned16>(block, part, wi[u][r]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int it = it0 + (u / G) * W * G + u % G;
      if (it >= items) break;
      const int blk = it / B::kItems;
      const int64_t e0 = (int64_t)blk * B::kQK + wi[u][0].e[0], e1 = (int64_t)blk * B::kQK + wi[u][0].e[1];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int64_t xm = m < a.m ? m : a.m - 1;  // padded rows repeat the last one and are not stored
        const int8_t* xr = xq + xm * k;
        const uint4 x0 = *reinterpret_cast<const uint4*>(xr + e0);
        const uint4 x1 = *reinterpret_cast<const uint4*>(xr + e1);
        // Both halves share one activation scale: they lie in one 32-block (legacy) or one 256-block (K-quants).
        const float dx = xd[xm * k32 + e0 / 32];
        float s0 = 0.f, s1 = 0.f;
        if constexpr (B::kHasMin) {
          if constexpr (B::kQK == 32) {
            const int2 s = *reinterpret_cast<const int2*>(xs + xm * k16 + e0 / 16);  // e1 = e0 + 16
            s0 = (float)s.x;
            s1 = (float)s.y;
          } else {
            s0 = (float)xs[xm * k16 + e0 / 16];
            s1 = (float)xs[xm * k16 + e1 / 16];
          }
        }
        // Every rounding spelled out (mul_rn, fmaf): the compiler may not contract these products differently in
        // the shapes (M, R, U) of different launches, so a row's sum is the same whatever M is (batch-invariant
        // mode relies on it; on the H100, Q4_K / Q5_K rows differed between shapes by 5.7e-6 with the plain
        // expression).
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const Item& w = wi[u][r];
          float h = mul_rn(w.a[0], (float)dot16(w.q, x0));
          h = fmaf(w.a[1], (float)dot16(w.q + 4, x1), h);
          if constexpr (B::kHasMin) {
            h = fmaf(w.b[0], s0, h);
            h = fmaf(w.b[1], s1, h);
          }
          acc[r][m] = fmaf(dx, h, acc[r][m]);
        }
      }
    }
  }
  reduce_and_store<M, R>(acc, lane, row0, a.n, a.m, a.out, a.ldo, a.residual);
}

#endif  // device compilation

// Whether Q4_K / Q5_K rows can take the aligned 16-byte loads (decode_item's kAligned16).
template <DType T>
bool rows_aligned16(const QmvArgs& a) {
  return reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.row_bytes % 16 == 0;
}

// Template shapes (M activation rows padded to a power of two, R weight rows per warp, U items per lane in
// flight): M = 1 streams R = matvec_rows_m1() rows per warp, larger M reuses each activation load for more
// weight rows.
template <DType T, int M, int R, int U>
void launch_quant_matvec_shape(GpuDevice& device, const QmvArgs& a) {
  const int64_t warps_per_block = kMatvecThreads / device.props().warp_size;
  const int64_t warps = (a.n + R - 1) / R;
  const int64_t blocks = (warps + warps_per_block - 1) / warps_per_block;
  auto* kernel = quant_matvec_kernel<T, M, R, U, false>;
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const bool aligned = rows_aligned16<T>(a);
    if (aligned) kernel = quant_matvec_kernel<T, M, R, U, true>;
    if constexpr (U % 2 == 0) {
      if (matvec_pairs()) {
        kernel = aligned ? quant_matvec_kernel<T, M, R, U, true, true> : quant_matvec_kernel<T, M, R, U, false, true>;
      }
    }
  }
  launch_decode_kernel(kernel, dim3((unsigned)blocks), dim3(kMatvecThreads), 0, device.stream(), a);
}

template <DType T>
void launch_quant_matvec_typed(GpuDevice& device, const QmvArgs& a) {
  RBEE_ASSERT(a.m >= 1 && a.m <= kQuantMatvecMaxRows, "quant matvec takes 1..{} rows, got {}", kQuantMatvecMaxRows,
              a.m);
  if (a.m == 1) {
    if (matvec_rows_m1() == 1) launch_quant_matvec_shape<T, 1, 1, 4>(device, a);
    else launch_quant_matvec_shape<T, 1, 2, 2>(device, a);
  } else if (a.m == 2) {
    launch_quant_matvec_shape<T, 2, 2, 2>(device, a);
  } else if (a.m <= 4) {
    launch_quant_matvec_shape<T, 4, 2, 2>(device, a);
  } else if (a.m <= 8) {
    launch_quant_matvec_shape<T, 8, 4, 1>(device, a);
  } else {
    launch_quant_matvec_shape<T, 16, 2, 1>(device, a);  // R * M = 32 values per warp: fits any warp width
  }
}

}  // namespace rbee::gpu::quant
