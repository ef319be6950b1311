// GPU rms_norm and the fused add_rms_norm, memory-bound: 16-byte loads and stores when the rows allow.
//
// Semantics are the CPU's (cpu_norm.cpp, cpu_nn.cpp): f16/bf16/f32 compute in f32 and round once, f64 in f64;
// out = x * rstd [* w], rstd = 1 / sqrt(mean(x^2) + eps). add_rms_norm stores sum = x + residual in the dtype and
// normalizes the sum as stored.
//
// x, residual, out, sum [rows, n] contiguous; w [n]. A group of `group` threads (a power of two) takes a row:
// pass 1 reads it in vectors of V elements and reduces the sum of squares (shuffles, then shared memory across
// warps), pass 2 reads it again (from cache: rows are at most tens of KB) and writes the scaled row. V = 16 bytes
// of T when n is a multiple of it and every pointer is 16-byte aligned, else 1.
#include <cmath>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

// res == null: rms_norm of x. Else add_rms_norm: sum_out = x + res as stored, out = rms_norm(sum) * w.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    rms_rows_kernel(const T* x, const T* res, const T* w, int64_t rows, int64_t n, float eps, int group,
                    T* sum_out, T* out) {
  using C = compute_t<T>;
  __shared__ C scratch[kThreads / 32];
  const int lane = threadIdx.x & (group - 1), slot = threadIdx.x / group, per_block = blockDim.x / group;
  const int64_t nv = n / V;
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + slot;
    const bool active = r < rows;
    C ss = 0;
    if (active) {
      for (int64_t j = lane; j < nv; j += group) {
        C a[V];
        load_vec<T, V>(x + r * n + j * V, a);
        if (res) {
          C b[V];
          load_vec<T, V>(res + r * n + j * V, b);
#pragma unroll
          for (int k = 0; k < V; ++k) a[k] += b[k];
          store_vec<T, V>(sum_out + r * n + j * V, a);
#pragma unroll
          for (int k = 0; k < V; ++k) {  // the sum as stored
            T t;
            store(&t, a[k]);
            a[k] = load(&t);
          }
        }
#pragma unroll
        for (int k = 0; k < V; ++k) ss += a[k] * a[k];
      }
    }
    ss = group_sum(ss, scratch, group);
    const C rstd = C(1) / sqrt(ss / C(n) + C(eps));
    if (active) {
      const T* src = res ? sum_out : x;
      for (int64_t j = lane; j < nv; j += group) {
        C a[V];
        load_vec<T, V>(src + r * n + j * V, a);
        if (w) {
          C wv[V];
          load_vec<T, V>(w + j * V, wv);
#pragma unroll
          for (int k = 0; k < V; ++k) a[k] = a[k] * rstd * wv[k];
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) a[k] = a[k] * rstd;
        }
        store_vec<T, V>(out + r * n + j * V, a);
      }
    }
  }
}

template <class T>
void launch_rms(GpuDevice& dev, const Tensor& x, const Tensor* res, const Tensor* w, float eps, Tensor* sum_out,
                Tensor& out) {
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  const T* px = static_cast<const T*>(x.data());
  const T* pr = res ? static_cast<const T*>(res->data()) : nullptr;
  const T* pw = w ? static_cast<const T*>(w->data()) : nullptr;
  T* ps = sum_out ? static_cast<T*>(sum_out->data()) : nullptr;
  T* po = static_cast<T*>(out.data());
  constexpr int kV = kVec16<T>;
  const bool vec = vec16_ok({px, pr, pw, ps, po}, {n}, kV);
  // About four vectors per thread, 32 to 256 threads per row.
  const int group = row_group_size(vec ? n / kV : n, 4);
  const unsigned blocks = blocks_for(rows, kThreads / group);
  if (vec) {
    rms_rows_kernel<T, kV><<<blocks, kThreads, 0, dev.stream()>>>(px, pr, pw, rows, n, eps, group, ps, po);
  } else {
    rms_rows_kernel<T, 1><<<blocks, kThreads, 0, dev.stream()>>>(px, pr, pw, rows, n, eps, group, ps, po);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace

void GpuKernels::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  device_.activate();
  if (x.dim(-1) == 0 || x.numel() == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    launch_rms<decltype(tag)>(device_, x, nullptr, weight, eps, nullptr, out);
  });
}

void GpuKernels::add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                              Tensor& sum_out, Tensor& norm_out) {
  device_.activate();
  if (x.dim(-1) == 0 || x.numel() == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    launch_rms<decltype(tag)>(device_, x, &residual, &weight, eps, &sum_out, norm_out);
  });
}

}  // namespace rbee::gpu
