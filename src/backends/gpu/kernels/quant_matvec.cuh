// Quantized matrix-vector products for decode (M <= 16 activation rows), read straight from the packed blocks.
//
// A warp owns R consecutive weight rows; its lanes stride over the rows' 32-element items (lane l takes
// items l, l + W, ...), so a warp's loads of one item index cover consecutive bytes of each row. Per item a
// lane decodes the R weight items once (decode_item, 16-byte loads), then for each of the M activation rows
// loads 32 int8 levels (two 16-byte loads), forms two 16-element int8 dot products per weight row with
// dot4_i8 and adds d_x * (a * dot + b * sum_x) to its R x M accumulators. Every weight byte is read once per
// launch; the activations (M * K bytes) are re-read per warp from L1/L2, R times less often thanks to the
// R rows per warp. A transposed butterfly then leaves one sum per lane for the R x M outputs.
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

// Writes acc[r][m] (summed over the warp) to out[m * ldo + row0 + r] for rows < n and m < m_valid.
template <int M, int R>
__device__ __forceinline__ void reduce_and_store(float (&acc)[R][M], int lane, int64_t row0, int64_t n, int m_valid,
                                                 float* out, int64_t ldo) {
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
    if (row0 + r < n && m < m_valid) out[m * ldo + row0 + r] = v[0];
  }
}

// One 16-element int8 dot product: q (4 words of weight levels) . 16 activation levels.
__device__ __forceinline__ int dot16(const uint32_t* q, const uint4& x) {
  int acc = dot4_i8((int)q[0], (int)x.x, 0);
  acc = dot4_i8((int)q[1], (int)x.y, acc);
  acc = dot4_i8((int)q[2], (int)x.z, acc);
  return dot4_i8((int)q[3], (int)x.w, acc);
}

template <DType T, int M, int R>
__global__ void __launch_bounds__(kMatvecThreads) quant_matvec_kernel(QmvArgs a) {
  using B = BlockTraits<T>;
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  const int lane = threadIdx.x % W;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / W;
  const int64_t row0 = warp * R;
  if (row0 >= a.n) return;  // uniform over the warp
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = a.w + (row0 + r < a.n ? row0 + r : a.n - 1) * a.row_bytes;
  const int64_t k = a.k, k32 = k / 32, k16 = k / 16;

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  }

  const int items = (int)k32;
#pragma unroll 2
  for (int it = lane; it < items; it += W) {
    const int blk = it / B::kItems, part = it % B::kItems;
    Item wi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) decode_item<T>(rows[r] + (int64_t)blk * B::kTS, part, wi[r]);
    const int64_t e0 = (int64_t)blk * B::kQK + wi[0].e[0], e1 = (int64_t)blk * B::kQK + wi[0].e[1];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int64_t xm = m < a.m ? m : a.m - 1;  // padded rows repeat the last one and are not stored
      const int8_t* xq = a.x.q + xm * k;
      const uint4 x0 = *reinterpret_cast<const uint4*>(xq + e0);
      const uint4 x1 = *reinterpret_cast<const uint4*>(xq + e1);
      // Both halves share one activation scale: they lie in one 32-block (legacy) or one 256-block (K-quants).
      const float dx = a.x.d[xm * k32 + e0 / 32];
      float s0 = 0.f, s1 = 0.f;
      if constexpr (B::kHasMin) {
        if constexpr (B::kQK == 32) {
          const int2 s = *reinterpret_cast<const int2*>(a.x.s + xm * k16 + e0 / 16);  // e1 = e0 + 16
          s0 = (float)s.x;
          s1 = (float)s.y;
        } else {
          s0 = (float)a.x.s[xm * k16 + e0 / 16];
          s1 = (float)a.x.s[xm * k16 + e1 / 16];
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float h = wi[r].a[0] * (float)dot16(wi[r].q, x0) + wi[r].a[1] * (float)dot16(wi[r].q + 4, x1);
        if constexpr (B::kHasMin) h += wi[r].b[0] * s0 + wi[r].b[1] * s1;
        acc[r][m] += dx * h;
      }
    }
  }
  reduce_and_store<M, R>(acc, lane, row0, a.n, a.m, a.out, a.ldo);
}

#endif  // device compilation

// Template shapes (M activation rows padded to a power of two, R weight rows per warp): M = 1 streams one row
// per warp (most warps in flight); larger M reuses each activation load for more weight rows.
template <DType T, int M, int R>
void launch_quant_matvec_shape(GpuDevice& device, const QmvArgs& a) {
  const int64_t warps_per_block = kMatvecThreads / device.props().warp_size;
  const int64_t warps = (a.n + R - 1) / R;
  const int64_t blocks = (warps + warps_per_block - 1) / warps_per_block;
  quant_matvec_kernel<T, M, R><<<(unsigned)blocks, kMatvecThreads, 0, device.stream()>>>(a);
  RBEE_GPU_CHECK_LAUNCH();
}

template <DType T>
void launch_quant_matvec_typed(GpuDevice& device, const QmvArgs& a) {
  RBEE_ASSERT(a.m >= 1 && a.m <= kQuantMatvecMaxRows, "quant matvec takes 1..{} rows, got {}", kQuantMatvecMaxRows,
              a.m);
  if (a.m == 1) launch_quant_matvec_shape<T, 1, 1>(device, a);
  else if (a.m == 2) launch_quant_matvec_shape<T, 2, 2>(device, a);
  else if (a.m <= 4) launch_quant_matvec_shape<T, 4, 2>(device, a);
  else if (a.m <= 8) launch_quant_matvec_shape<T, 8, 4>(device, a);
  else launch_quant_matvec_shape<T, 16, 2>(device, a);  // R * M = 32 values per warp: fits any warp width
}

}  // namespace rbee::gpu::quant
