// Device-side helpers shared by every GPU kernel: element loads/stores by dtype, strided index math, warp and
// block reductions written for any warp width (RBEE_DEVICE_WARP_SIZE: 32 or 64).
#pragma once

#include <atomic>
#include <cstdint>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/platform.h"
#include "rbee/core/half.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

// ---- 16-bit float storage (bit patterns; conversions are ours so both vendors agree exactly) ----
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

// The exact conversions of core/half.h (host and device).
RBEE_HOST_DEVICE inline float bf16_to_float(uint16_t b) { return ::rbee::bf16_bits_to_f32(b); }
RBEE_HOST_DEVICE inline uint16_t float_to_bf16(float f) { return ::rbee::f32_to_bf16_bits(f); }

#if defined(__CUDACC__) || defined(__HIPCC__)
__device__ inline float f16_to_float(uint16_t b) {
  __half h;
  memcpy(&h, &b, 2);
  return __half2float(h);
}
__device__ inline uint16_t float_to_f16(float f) {
  const __half h = __float2half_rn(f);
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
// For f16 values that go to memory byte by byte (the scales of quantized blocks), use ::rbee::f32_to_f16_bits
// (core/half.h, integer arithmetic only) rather than float_to_f16: with nvcc 13 for sm_90, the bytes of a __half
// stored through st.global.u8 came out wrong on H100/H200 (block scales with 00 low bytes), while an integer value
// is stored right.

// Arithmetic type of a storage type: float for 16-bit floats, the type itself otherwise.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<bf16_t> { using type = float; };
template <> struct compute_type<f16_t> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

template <class T> __device__ inline compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, bf16_t>) return bf16_to_float(p->bits);
  else if constexpr (std::is_same_v<T, f16_t>) return f16_to_float(p->bits);
  else return *p;
}
template <class T> __device__ inline void store(T* p, compute_t<T> v) {
  if constexpr (std::is_same_v<T, bf16_t>) p->bits = float_to_bf16(v);
  else if constexpr (std::is_same_v<T, f16_t>) p->bits = float_to_f16(v);
  else *p = v;
}
// Any storage type -> float (for kernels that compute in f32 whatever the input).
template <class T> __device__ inline float load_f32(const T* p) { return (float)load(p); }

// ---- reductions over a warp / a block, for any warp width ----
__device__ inline float warp_sum(float v) {
  for (int m = RBEE_DEVICE_WARP_SIZE / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int m = RBEE_DEVICE_WARP_SIZE / 2; m > 0; m >>= 1) v = fmaxf(v, shfl_xor(v, m));
  return v;
}
// Sum over the whole block (blockDim.x a multiple of the warp size, <= 1024). `scratch` holds >= 32 floats.
__device__ inline float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % RBEE_DEVICE_WARP_SIZE, warp = threadIdx.x / RBEE_DEVICE_WARP_SIZE;
  const int warps = blockDim.x / RBEE_DEVICE_WARP_SIZE;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? scratch[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) scratch[0] = v;
  __syncthreads();
  return scratch[0];
}
__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % RBEE_DEVICE_WARP_SIZE, warp = threadIdx.x / RBEE_DEVICE_WARP_SIZE;
  const int warps = blockDim.x / RBEE_DEVICE_WARP_SIZE;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? scratch[threadIdx.x] : -INFINITY;
  if (warp == 0) v = warp_max(v);
  if (threadIdx.x == 0) scratch[0] = v;
  __syncthreads();
  return scratch[0];
}
#endif

// ---- strided layouts passed to kernels by value ----
struct Layout {
  int rank;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];
};
inline Layout layout_of(const Tensor& t) {
  Layout l{};
  l.rank = t.rank();
  for (int i = 0; i < l.rank; ++i) {
    l.shape[i] = t.dim(i);
    l.strides[i] = t.stride(i);
  }
  return l;
}
// Element offset of the row-major linear index `i` in a tensor of `shape` with `strides`.
RBEE_HOST_DEVICE inline int64_t strided_offset(const Layout& l, int64_t i) {
  int64_t off = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t n = l.shape[d];
    off += (i % n) * l.strides[d];
    i /= n;
  }
  return off;
}

// Grid size for `n` items at `threads` per block, capped (kernels loop grid-stride).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return (unsigned)std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535LL * 16);
}

// Lets `kernel` take `bytes` of dynamic shared memory on `dev` (func_set_max_dynamic_smem) where that is above the
// default 48 KiB, once per kernel and device: `opted` is the kernel's own static, one bit per device index (devices
// past 64 opt in at every launch). Returns whether it opted in at this call (so a caller can set other attributes of
// the kernel once too).
inline bool opt_in_dynamic_smem(GpuDevice& dev, const void* kernel, int bytes, std::atomic<uint64_t>& opted) {
  if (bytes <= 48 * 1024) return false;
  const int idx = dev.index();
  if (idx < 64 && (opted.load() >> idx & 1)) return false;
  RBEE_GPU_CHECK(func_set_max_dynamic_smem(kernel, bytes));
  if (idx < 64) opted.fetch_or(uint64_t{1} << idx);
  return true;
}

// ---- dtype dispatch on the host: calls f(T{}) with the storage type ----
template <class F> void visit_float_storage(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16_t{});
    case DType::BF16: return f(bf16_t{});
    case DType::F64: return f(double{});
    default: RBEE_THROW(ErrorCode::Unsupported, "gpu: expected a floating dtype, got {}", dtype_name(t));
  }
}
template <class F> void visit_plain_storage(DType t, F&& f) {
  switch (t) {
    case DType::I64: return f(int64_t{});
    case DType::I32: return f(int32_t{});
    case DType::U32: return f(uint32_t{});
    case DType::U8: return f(uint8_t{});
    default: return visit_float_storage(t, std::forward<F>(f));
  }
}

}  // namespace rbee::gpu
