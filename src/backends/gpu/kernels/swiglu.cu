// GPU gated activations, with the CPU's numerics (cpu_nn.cpp), f16/bf16/f32 in f32, f64 in f64:
//   swiglu: out = silu(gate) * up = gate / (1 + e^-gate) * up over contiguous tensors (e^-gate clamped so it stays
//           finite);
//   geglu:  out [rows, F] = hidden * gelu_erf(gate) for x [rows, 2F] = [hidden | gate] (scalar_ops.h's formula).
// Memory-bound: each thread moves 16 bytes of each operand per step when the pointers (and for geglu F) allow
// 16-byte vectors; else element by element.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/common/scalar_ops.h"

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

template <class C>
__device__ inline C silu_mul(C g, C u) {
  C e;
  if constexpr (std::is_same_v<C, double>) e = exp(-g);
  else e = expf(fminf(-g, 88.0f));  // silu(-88) is -0 in f32 anyway
  return g / (C(1) + e) * u;
}

// gate, up, out [n]; V elements per step (16-byte aligned pointers when V > 1).
template <class T, int V>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const T* gate, const T* up, int64_t n, T* out) {
  using C = compute_t<T>;
  const int64_t nv = n / V, stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < nv; i += stride) {
    C g[V], u[V];
    load_vec<T, V>(gate + i * V, g);
    load_vec<T, V>(up + i * V, u);
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = silu_mul(g[k], u[k]);
    store_vec<T, V>(out + i * V, g);
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) store(out + i, silu_mul(load(gate + i), load(up + i)));
}

// x [rows, 2F], out [rows, F]; V consecutive features per step (F % V == 0 and 16-byte aligned rows when V > 1).
// I: the index type of the rows * F / V steps (uint32_t when they fit: the row / column split is a 32-bit division,
// several times cheaper than a 64-bit one, which cost as much as the GELUs of a step).
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) geglu_kernel(const T* x, int64_t rows, int64_t f, T* out) {
  using C = compute_t<T>;
  const I fv = (I)(f / V), n = (I)(rows * (f / V)), stride = (I)gridDim.x * blockDim.x;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / fv, c = (int64_t)(i % fv) * V;
    C h[V], g[V];
    load_vec<T, V>(x + r * 2 * f + c, h);
    load_vec<T, V>(x + r * 2 * f + f + c, g);
#pragma unroll
    for (int k = 0; k < V; ++k) h[k] *= scalar::unary_value<C>(UnaryOp::GeluErf, g[k], C(0));
    store_vec<T, V>(out + r * f + c, h);
  }
}

}  // namespace

void GpuKernels::geglu(const Tensor& x, Tensor& out) {
  device_.activate();
  const int64_t rows = out.dim(0), f = out.dim(1);
  if (rows == 0 || f == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = kVec16<T>;
    const T* px = static_cast<const T*>(x.data());
    T* po = static_cast<T*>(out.data());
    const bool vec = vec16_ok({px, po}, {f}, kV);
    const int64_t steps = rows * (vec ? f / kV : f);
    // 32-bit indices while the steps and the grid's stride stay below 2^32.
    const bool narrow = steps + (int64_t)grid_for(steps, kThreads) * kThreads < (int64_t{1} << 32);
    auto launch = [&](auto v_tag, auto index_tag) {
      constexpr int Vl = decltype(v_tag)::value;
      using I = decltype(index_tag);
      geglu_kernel<T, Vl, I><<<grid_for(steps, kThreads), kThreads, 0, device_.stream()>>>(px, rows, f, po);
    };
    using VecTag = std::integral_constant<int, kV>;
    using OneTag = std::integral_constant<int, 1>;
    if (vec && narrow) launch(VecTag{}, uint32_t{});
    else if (vec) launch(VecTag{}, int64_t{});
    else if (narrow) launch(OneTag{}, uint32_t{});
    else launch(OneTag{}, int64_t{});
    RBEE_GPU_CHECK_LAUNCH();
  });
}

void GpuKernels::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  device_.activate();
  const int64_t n = gate.numel();
  if (n == 0) return;
  visit_float_storage(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = kVec16<T>;
    const T* g = static_cast<const T*>(gate.data());
    const T* u = static_cast<const T*>(up.data());
    T* o = static_cast<T*>(out.data());
    if (vec16_ok({g, u, o}, {}, kV)) {
      swiglu_kernel<T, kV><<<grid_for(ceil_div(n, kV), kThreads), kThreads, 0, device_.stream()>>>(g, u, n, o);
    } else {
      swiglu_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, device_.stream()>>>(g, u, n, o);
    }
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
