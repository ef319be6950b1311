// Matrix-vector products with F32 / F16 / BF16 weights (the dense linear layers of unquantized models) for up
// to kMatvecMaxRows f32 activation rows: out[m, j] = sum_k w[j, k] * x'[m, k], f32 accumulation, where x' is x
// for F32 weights and x rounded to the weight's type for F16 / BF16 weights (qmatmul's semantics, kernels.h:
// the products are exact in f32, as in the one-GEMM BLAS path). Also the rounding kernel of that BLAS path.
//
// Same shape as the quantized matvec: a warp owns R weight rows, lanes stride over 16-byte chunks of them
// (8 f16/bf16 or 4 f32 weights per load), every weight byte is read once, and each activation chunk loaded is
// used for the R rows. Rows that are not 16-byte aligned (K * element size not a multiple of 16, or a
// misaligned base) take the element-wise variant.
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/quant_gemv_fused.h"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/quant_matvec.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu::quant {

namespace {

// Weights of one 16-byte chunk (kVec) or one element, as floats.
template <class T, bool kVec> struct Chunk {
  static constexpr int kElems = kVec ? 16 / (int)sizeof(T) : 1;
};

template <class T>
__device__ __forceinline__ void unpack16(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) memcpy(&f[i], &w[i], 4);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, bf16_t>) {
        f[2 * i] = bf16_to_float((uint16_t)(w[i] & 0xFFFFu));
        f[2 * i + 1] = bf16_to_float((uint16_t)(w[i] >> 16));
      } else {
        f[2 * i] = f16_to_float((uint16_t)(w[i] & 0xFFFFu));
        f[2 * i + 1] = f16_to_float((uint16_t)(w[i] >> 16));
      }
    }
  }
}

// x as the products with weights of storage type T see it: rounded to T's 16-bit format, or x itself for f32.
template <class T>
__device__ __forceinline__ float activation(float v) {
  if constexpr (std::is_same_v<T, bf16_t>) return bf16_to_float(float_to_bf16(v));
  else if constexpr (std::is_same_v<T, f16_t>) return f16_to_float(float_to_f16(v));
  else return v;
}

// One chunk of weights as loaded (16 bytes, or one element already as a float) and as floats.
template <bool kVec> using RawChunk = std::conditional_t<kVec, uint4, float>;
template <class T, bool kVec>
__device__ __forceinline__ RawChunk<kVec> load_chunk(const T* row, int64_t c) {
  if constexpr (kVec) return reinterpret_cast<const uint4*>(row)[c];
  else return load_f32(row + c);
}
template <class T, bool kVec>
__device__ __forceinline__ void chunk_floats(const RawChunk<kVec>& raw, float* f) {
  if constexpr (kVec) unpack16<T>(raw, f);
  else f[0] = raw;
}

// acc[r][m] += w chunk c of row r . x' chunk c of activation row m (x' as activation<T> forms it).
template <class T, int M, int R, bool kVec>
__device__ __forceinline__ void accumulate_chunk(const float (&wf)[R][Chunk<T, kVec>::kElems], const float* x,
                                                 int m_valid, int64_t k, int64_t c, float (&acc)[R][M]) {
  constexpr int C = Chunk<T, kVec>::kElems;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float* xr = x + (m < m_valid ? m : m_valid - 1) * k + c * C;
    float xf[C];
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < C; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(xr + i);
        xf[i] = activation<T>(v.x), xf[i + 1] = activation<T>(v.y);
        xf[i + 2] = activation<T>(v.z), xf[i + 3] = activation<T>(v.w);
      }
    } else {
      xf[0] = activation<T>(xr[0]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[r][m];
#pragma unroll
      for (int i = 0; i < C; ++i) s += wf[r][i] * xf[i];
      acc[r][m] = s;
    }
  }
}

// P > 0: the weight loads run P chunks (per lane and row) ahead of their use, and the first P are issued before
// grid_dependency_wait (weights never depend on earlier launches: under PDL they arrive while the kernel before
// drains); each round then issues the next round's loads before it uses the current ones. P == 0: the loop as it
// was (RBEE_GEMV_PIPELINE=0), every load after the wait, two chunks per lane unrolled.
// The chunks a lane visits and the order of its f32 sums are the same either way (c = lane, lane + W, ...).
template <class T, int M, int R, bool kVec, int P>
__global__ void __launch_bounds__(kMatvecThreads)
    float_gemv_kernel(const T* __restrict__ w, int64_t n, int64_t k, const float* __restrict__ x, int m_valid,
                      float* __restrict__ out, int64_t ldo, const float* __restrict__ residual, bool prefetch) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  constexpr int C = Chunk<T, kVec>::kElems;
  const int lane = threadIdx.x % W;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / W;
  const int64_t row0 = warp * R;  // warps past the last row run on clamped rows and store nothing
  if (prefetch && lane == 0 && row0 < n) {
    prefetch_rows(reinterpret_cast<const uint8_t*>(w), row0, row0 + R <= n ? R : n - row0, k * (int64_t)sizeof(T));
  }
  grid_dependency_trigger();
  const T* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = w + (row0 + r < n ? row0 + r : n - 1) * k;

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  }
  const int64_t chunks = k / C;
  if constexpr (P == 0) {
    grid_dependency_wait();  // x comes from an earlier launch (launch_decode_kernel)
#pragma unroll 2
    for (int64_t c = lane; c < chunks; c += W) {
      float wf[R][C];
#pragma unroll
      for (int r = 0; r < R; ++r) chunk_floats<T, kVec>(load_chunk<T, kVec>(rows[r], c), wf[r]);
      accumulate_chunk<T, M, R, kVec>(wf, x, m_valid, k, c, acc);
    }
  } else {
    RawChunk<kVec> next[P][R] = {};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = lane + (int64_t)p * W;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (c < chunks) next[p][r] = load_chunk<T, kVec>(rows[r], c);
      }
    }
    grid_dependency_wait();  // x comes from an earlier launch (launch_decode_kernel)
    for (int64_t base = 0; base < chunks; base += (int64_t)P * W) {
      RawChunk<kVec> cur[P][R];
#pragma unroll
      for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int r = 0; r < R; ++r) cur[p][r] = next[p][r];
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t c = base + (int64_t)P * W + lane + (int64_t)p * W;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (c < chunks) next[p][r] = load_chunk<T, kVec>(rows[r], c);
        }
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t c = base + lane + (int64_t)p * W;
        if (c < chunks) {
          float wf[R][C];
#pragma unroll
          for (int r = 0; r < R; ++r) chunk_floats<T, kVec>(cur[p][r], wf[r]);
          accumulate_chunk<T, M, R, kVec>(wf, x, m_valid, k, c, acc);
        }
      }
    }
  }
  reduce_and_store<M, R>(acc, lane, row0, n, m_valid, out, ldo, residual);
}

// RBEE_GEMV_PIPELINE=0: the gemv loop of before (no loads ahead, none before the dependency wait), for A/B runs.
bool gemv_pipeline() {
  static const bool on = env::flag_or("RBEE_GEMV_PIPELINE", true);
  return on;
}

template <class T, int M, int R, bool kVec>
void launch_shape(GpuDevice& device, const GemvArgs& a) {
  const int64_t warps_per_block = kMatvecThreads / device.props().warp_size;
  const int64_t blocks = ((a.n + R - 1) / R + warps_per_block - 1) / warps_per_block;
  // Chunks loaded ahead per lane and row: 4 for one row per warp, fewer when a warp owns more rows (registers).
  constexpr int kAhead = R == 1 ? 4 : R == 2 ? 2 : 1;
  auto kernel = gemv_pipeline() ? float_gemv_kernel<T, M, R, kVec, kAhead> : float_gemv_kernel<T, M, R, kVec, 0>;
  launch_decode_kernel(kernel, dim3((unsigned)blocks), dim3(kMatvecThreads), 0, device.stream(),
                       static_cast<const T*>(a.w), a.n, a.k, a.x, a.m, a.out, a.ldo, a.residual, a.prefetch);
}

template <class T, bool kVec>
void launch_rows(GpuDevice& device, const GemvArgs& a) {
  if (a.m == 1) launch_shape<T, 1, 1, kVec>(device, a);
  else if (a.m == 2) launch_shape<T, 2, 2, kVec>(device, a);
  else if (a.m <= 4) launch_shape<T, 4, 2, kVec>(device, a);
  else launch_shape<T, 8, 4, kVec>(device, a);
}

// out[i] = round16(x[i]), 4 elements per thread (one 16-byte load, one 8-byte store) plus a scalar tail.
template <class T>
__global__ void round_to_half_kernel(const float* __restrict__ x, int64_t count, uint16_t* __restrict__ out) {
  const int64_t quads = count / 4;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < quads; q += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(x)[q];
    uint16_t h[4];
    if constexpr (std::is_same_v<T, bf16_t>) {
      h[0] = float_to_bf16(v.x), h[1] = float_to_bf16(v.y), h[2] = float_to_bf16(v.z), h[3] = float_to_bf16(v.w);
    } else {
      h[0] = float_to_f16(v.x), h[1] = float_to_f16(v.y), h[2] = float_to_f16(v.z), h[3] = float_to_f16(v.w);
    }
    reinterpret_cast<uint2*>(out)[q] = make_uint2(h[0] | ((uint32_t)h[1] << 16), h[2] | ((uint32_t)h[3] << 16));
  }
  if (blockIdx.x == 0 && threadIdx.x < count % 4) {
    const int64_t e = quads * 4 + threadIdx.x;
    out[e] = std::is_same_v<T, bf16_t> ? float_to_bf16(x[e]) : float_to_f16(x[e]);
  }
}

// ---- one activation row through a fused source (norm_qmatmul / swiglu_qmatmul with float weights, M = 1) ----
//
// A block first forms the row x' = round16(source) once in shared memory (as the weight's storage type: the values
// the products see), then its warps take weight rows in rounds: row first + warp, with first the block's first row
// and then + all warps of the grid (a grid of about two blocks per multiprocessor, so the source is formed ~2 x SMs
// times, not once per 4 rows). Per row the lane loop, its f32 sums and the warp reduction are float_gemv_kernel's
// (same chunks per lane, same order), the loads run P chunks ahead (across rows too), and the first P are issued
// before grid_dependency_wait. The norm's mean of squares is the activation pass's (f32 squares summed in double
// over the block, mean rounded to f32, rstd = 1 / sqrtf).

__device__ __forceinline__ float silu_mul_f32(float g, float u) { return g / (1.f + expf(fminf(-g, 88.0f))) * u; }

template <class T>
__device__ __forceinline__ void store_act(T* xs, int64_t e, float v) {
  if constexpr (std::is_same_v<T, float>) xs[e] = v;
  else if constexpr (std::is_same_v<T, bf16_t>) reinterpret_cast<uint16_t*>(xs)[e] = float_to_bf16(v);
  else reinterpret_cast<uint16_t*>(xs)[e] = float_to_f16(v);
}

__device__ __forceinline__ void load8f(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <class T, bool kNorm, int P>
__global__ void __launch_bounds__(kFusedGemvThreads) fused_gemv_kernel(FusedGemvArgs a) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  constexpr int C = Chunk<T, true>::kElems;
  __shared__ double partial[kFusedGemvThreads / W];
  T* xs = dynamic_smem<T>();  // [k] the row the products see
  const int lane = threadIdx.x % W;
  const int64_t warps = blockDim.x / W, all_warps = gridDim.x * warps;
  const int64_t chunks = a.k / C;
  const T* w = static_cast<const T*>(a.w);
  const int64_t warp = threadIdx.x / W;
  // Row of this warp in the block's round starting at `first` (rounds are uniform over the block, as the
  // emulator's block-wide shuffles need): rows past n are computed on row n - 1 and not stored.
  auto row_ptr = [&](int64_t first) { return w + (first + warp < a.n ? first + warp : a.n - 1) * a.k; };
  grid_dependency_trigger();
  RawChunk<true> next[P] = {};
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t c = lane + (int64_t)p * W;
    if (c < chunks) next[p] = load_chunk<T, true>(row_ptr(blockIdx.x * warps), c);
  }
  grid_dependency_wait();  // the source comes from earlier launches

  if constexpr (kNorm) {
    double ss = 0;
    for (int64_t e = 8 * (int64_t)threadIdx.x; e < a.k; e += 8 * (int64_t)blockDim.x) {
      float v[8];
      load8f(a.x + e, v);
      if (a.x_residual) {
        float r[8];
        load8f(a.x_residual + e, r);
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] += r[t];
        if (blockIdx.x == 0) {
          *reinterpret_cast<float4*>(a.sum_out + e) = make_float4(v[0], v[1], v[2], v[3]);
          *reinterpret_cast<float4*>(a.sum_out + e + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
      }
#pragma unroll
      for (int t = 0; t < 8; ++t) ss += (double)(v[t] * v[t]);
    }
    for (int off = W / 2; off > 0; off >>= 1) ss += shfl_xor(ss, off);
    if (lane == 0) partial[threadIdx.x / W] = ss;
    __syncthreads();
    double total = 0;
    for (int i = 0; i < (int)(blockDim.x / W); ++i) total += partial[i];
    const float mean = (float)(total / (double)a.k);
    const float rstd = 1.0f / sqrtf(mean + a.eps);
    for (int64_t e = 8 * (int64_t)threadIdx.x; e < a.k; e += 8 * (int64_t)blockDim.x) {
      float v[8], g[8];
      load8f(a.x + e, v);
      if (a.x_residual) {
        float r[8];
        load8f(a.x_residual + e, r);
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] += r[t];
      }
      load8f(a.norm_weight + e, g);
#pragma unroll
      for (int t = 0; t < 8; ++t) store_act<T>(xs, e + t, mul_rn(mul_rn(v[t], rstd), g[t]));
    }
  } else {
    for (int64_t e = 8 * (int64_t)threadIdx.x; e < a.k; e += 8 * (int64_t)blockDim.x) {
      float g[8], u[8];
      load8f(a.x + e, g);
      load8f(a.x + a.k + e, u);
#pragma unroll
      for (int t = 0; t < 8; ++t) store_act<T>(xs, e + t, silu_mul_f32(g[t], u[t]));
    }
  }
  __syncthreads();

  for (int64_t first = blockIdx.x * warps; first < a.n; first += all_warps) {
    const T* wr = row_ptr(first);
    const T* wn = row_ptr(first + all_warps);  // the next round's row (loaded ahead; clamped past the end)
    float acc[1][1] = {{0.f}};
    for (int64_t base = 0; base < chunks; base += (int64_t)P * W) {
      RawChunk<true> cur[P];
#pragma unroll
      for (int p = 0; p < P; ++p) cur[p] = next[p];
      const bool same_row = base + (int64_t)P * W < chunks;
#pragma unroll
      for (int p = 0; p < P; ++p) {  // the next round's loads: this row's, or the first of the next row's
        const int64_t c = (same_row ? base + (int64_t)P * W : 0) + lane + (int64_t)p * W;
        if (c < chunks) next[p] = load_chunk<T, true>(same_row ? wr : wn, c);
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t c = base + lane + (int64_t)p * W;
        if (c < chunks) {
          float wf[C], xf[C];
          unpack16<T>(cur[p], wf);
          unpack16<T>(reinterpret_cast<const uint4*>(xs)[c], xf);
          float s = acc[0][0];
#pragma unroll
          for (int i = 0; i < C; ++i) s += wf[i] * xf[i];
          acc[0][0] = s;
        }
      }
    }
    reduce_and_store<1, 1>(acc, lane, first + warp, a.n, 1, a.out, 0, a.residual);
  }
}

}  // namespace

void launch_round_to_half(GpuDevice& device, DType half_type, const float* x, int64_t count, uint16_t* out) {
  if (count == 0) return;
  RBEE_ASSERT(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0,
              "round_to_half: unaligned operands");
  constexpr int kThreads = 256;
  const unsigned grid = grid_for(std::max<int64_t>(count / 4, 1), kThreads);
  if (half_type == DType::BF16) {
    round_to_half_kernel<bf16_t><<<grid, kThreads, 0, device.stream()>>>(x, count, out);
  } else {
    RBEE_ASSERT(half_type == DType::F16, "round_to_half: {} is not a 16-bit float type", dtype_name(half_type));
    round_to_half_kernel<f16_t><<<grid, kThreads, 0, device.stream()>>>(x, count, out);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

void launch_float_gemv(GpuDevice& device, DType type, const GemvArgs& a) {
  RBEE_ASSERT(a.m >= 1 && a.m <= kMatvecMaxRows, "float gemv takes 1..{} rows, got {}", kMatvecMaxRows, a.m);
  visit_float_storage(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      RBEE_THROW(ErrorCode::Unsupported, "qmatmul: f64 weights are not supported on {}", RBEE_GPU_BACKEND_NAME);
    } else {
      // The vector variant needs 16-byte aligned weight rows and activation rows (x is 16-byte aligned and k a
      // multiple of the chunk makes every row so).
      const bool vec = (a.k * (int64_t)sizeof(T)) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.k % 4 == 0;
      if (vec) launch_rows<T, true>(device, a);
      else launch_rows<T, false>(device, a);
    }
  });
}

bool fused_float_gemv_enabled() {
  static const bool on = env::flag_or("RBEE_GEMV_FUSED", true);
  return on;
}

bool fused_float_gemv_fits(DType type, int64_t k) {
  const int64_t elem = type == DType::F32 ? 4 : 2;
  return (type == DType::F32 || type == DType::F16 || type == DType::BF16) && k > 0 && k % 8 == 0 &&
         k * elem <= kFusedGemvMaxSmem;
}

void launch_fused_float_gemv(GpuDevice& device, DType type, bool norm, const FusedGemvArgs& a) {
  RBEE_ASSERT(fused_float_gemv_fits(type, a.k), "fused float gemv: {} weights with k = {} do not fit",
              dtype_name(type), a.k);
  const int64_t warps_per_block = kFusedGemvThreads / device.props().warp_size;
  const int64_t blocks =
      std::min<int64_t>((a.n + warps_per_block - 1) / warps_per_block, 2 * (int64_t)device.props().multiprocessors);
  visit_float_storage(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      RBEE_THROW(ErrorCode::Unsupported, "qmatmul: f64 weights are not supported on {}", RBEE_GPU_BACKEND_NAME);
    } else {
      const size_t smem = (size_t)(a.k * (int64_t)sizeof(T));
      launch_decode_kernel(norm ? fused_gemv_kernel<T, true, 4> : fused_gemv_kernel<T, false, 4>,
                           dim3((unsigned)std::max<int64_t>(blocks, 1)), dim3(kFusedGemvThreads), smem,
                           device.stream(), a);
    }
  });
}

}  // namespace rbee::gpu::quant
