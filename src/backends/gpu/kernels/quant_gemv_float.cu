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

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/quant_matvec.cuh"

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

template <class T, int M, int R, bool kVec>
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
  grid_dependency_wait();  // x comes from an earlier launch (launch_decode_kernel)
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
#pragma unroll 2
  for (int64_t c = lane; c < chunks; c += W) {
    float wf[R][C];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if constexpr (kVec) unpack16<T>(reinterpret_cast<const uint4*>(rows[r])[c], wf[r]);
      else wf[r][0] = load_f32(rows[r] + c);
    }
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
  reduce_and_store<M, R>(acc, lane, row0, n, m_valid, out, ldo, residual);
}

template <class T, int M, int R, bool kVec>
void launch_shape(GpuDevice& device, const GemvArgs& a) {
  const int64_t warps_per_block = kMatvecThreads / device.props().warp_size;
  const int64_t blocks = ((a.n + R - 1) / R + warps_per_block - 1) / warps_per_block;
  launch_decode_kernel(float_gemv_kernel<T, M, R, kVec>, dim3((unsigned)blocks), dim3(kMatvecThreads), 0,
                       device.stream(), static_cast<const T*>(a.w), a.n, a.k, a.x, a.m, a.out, a.ldo, a.residual,
                       a.prefetch);
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

}  // namespace rbee::gpu::quant
