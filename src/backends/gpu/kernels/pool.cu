// GPU 2-D pooling (average, max) and nearest-neighbour upsampling, NCHW contiguous, one thread per output
// element, with the CPU's semantics (cpu_pool.cpp): windows are clipped to the image; max ignores the padding
// and propagates NaN; average divides by the window's size inside the padded input (count_include_pad) or by
// its in-bounds elements; upsampling reads x[oy * h / ho, ox * w / wo] (floor).
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

// x [planes, h, w] -> out [planes, ho, wo].
template <class T>
__global__ void pool2d_kernel(bool is_max, const T* x, int64_t planes, int64_t h, int64_t w, Pool2dParams p,
                              int64_t ho, int64_t wo, T* out) {
  using C = compute_t<T>;
  const int64_t total = planes * ho * wo;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = e % wo, oy = e / wo % ho, pl = e / (wo * ho);
    // The window [start, start + k) along each axis, clipped to the image and to the padded input.
    const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
    const int64_t y1 = y0 + p.kernel_h, x1 = x0 + p.kernel_w;
    const int64_t ylo = y0 > 0 ? y0 : 0, yhi = y1 < h ? y1 : h;
    const int64_t xlo = x0 > 0 ? x0 : 0, xhi = x1 < w ? x1 : w;
    const T* src = x + pl * h * w;
    C r;
    if (is_max) {
      r = -(C)INFINITY;
      for (int64_t iy = ylo; iy < yhi; ++iy) {
        for (int64_t ix = xlo; ix < xhi; ++ix) {
          const C v = load(src + iy * w + ix);
          if (v > r || v != v) r = v;
        }
      }
    } else {
      C sum = 0;
      for (int64_t iy = ylo; iy < yhi; ++iy) {
        for (int64_t ix = xlo; ix < xhi; ++ix) sum += load(src + iy * w + ix);
      }
      int64_t count;
      if (p.count_include_pad) {
        const int64_t py_lo = y0 > -p.pad_h ? y0 : -p.pad_h, py_hi = y1 < h + p.pad_h ? y1 : h + p.pad_h;
        const int64_t px_lo = x0 > -p.pad_w ? x0 : -p.pad_w, px_hi = x1 < w + p.pad_w ? x1 : w + p.pad_w;
        count = (py_hi - py_lo) * (px_hi - px_lo);
      } else {
        count = (yhi - ylo) * (xhi - xlo);
      }
      r = sum / (C)count;
    }
    store(out + e, r);
  }
}

template <class T>
__global__ void upsample_nearest2d_kernel(const T* x, int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo,
                                          T* out) {
  const int64_t total = planes * ho * wo;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = e % wo, oy = e / wo % ho, pl = e / (wo * ho);
    out[e] = x[(pl * h + oy * h / ho) * w + ox * w / wo];
  }
}

}  // namespace

void GpuKernels::pool2d(PoolOp op, const Tensor& x, const Pool2dParams& p, Tensor& out) {
  device_.activate();
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pool2d_kernel<T><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(
        op == PoolOp::Max, static_cast<const T*>(x.data()), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), p, out.dim(2),
        out.dim(3), static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

void GpuKernels::upsample_nearest2d(const Tensor& x, Tensor& out) {
  device_.activate();
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    upsample_nearest2d_kernel<T><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(
        static_cast<const T*>(x.data()), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), out.dim(2), out.dim(3),
        static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
