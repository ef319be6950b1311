// CPU 2-D pooling (average, max) and nearest-neighbour upsampling, NCHW contiguous.
// Both work plane by plane (one image-channel pair) in parallel; windows are clipped to the image once per
// output row/column instead of testing every tap.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

// The clipped window [lo, hi) of output index o along one axis, and its unclipped size inside the padded input.
struct Window {
  int64_t lo, hi, padded;
};
std::vector<Window> windows(int64_t out, int64_t in, int64_t k, int64_t stride, int64_t pad) {
  std::vector<Window> ws((size_t)out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * stride - pad, stop = start + k;
    // With pad <= k / 2 and the window inside the padded input, start >= -pad and stop <= in + pad.
    ws[(size_t)o] = {std::max<int64_t>(start, 0), std::min(stop, in),
                     std::min(stop, in + pad) - std::max(start, -pad)};
  }
  return ws;
}

// x [planes, h, w] -> out [planes, ho, wo].
template <class T>
void pool_forward(PoolOp op, const T* x, int64_t planes, int64_t h, int64_t w, const Pool2dParams& p, int64_t ho,
                  int64_t wo, T* out) {
  using C = compute_t<T>;
  const std::vector<Window> wy = windows(ho, h, p.kernel_h, p.stride_h, p.pad_h);
  const std::vector<Window> wx = windows(wo, w, p.kernel_w, p.stride_w, p.pad_w);
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, ho * wo * p.kernel_h * p.kernel_w));
  ThreadPool::global().parallel_for(planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* src = x + pl * h * w;
      T* dst = out + pl * ho * wo;
      for (int64_t oy = 0; oy < ho; ++oy) {
        const Window& y = wy[(size_t)oy];
        for (int64_t ox = 0; ox < wo; ++ox) {
          const Window& xw = wx[(size_t)ox];
          C r;
          if (op == PoolOp::Max) {
            // Padding never wins; NaN propagates like PyTorch's max_pool2d.
            r = -std::numeric_limits<C>::infinity();
            for (int64_t iy = y.lo; iy < y.hi; ++iy) {
              for (int64_t ix = xw.lo; ix < xw.hi; ++ix) {
                const C v = load(src[iy * w + ix]);
                if (v > r || std::isnan(v)) r = v;  // once r is NaN, nothing replaces it
              }
            }
          } else {
            C sum = 0;
            for (int64_t iy = y.lo; iy < y.hi; ++iy) {
              for (int64_t ix = xw.lo; ix < xw.hi; ++ix) sum += load(src[iy * w + ix]);
            }
            const int64_t count =
                p.count_include_pad ? y.padded * xw.padded : (y.hi - y.lo) * (xw.hi - xw.lo);
            r = sum / (C)count;
          }
          dst[oy * wo + ox] = store<T>(r);
        }
      }
    }
  });
}

// x [planes, h, w] -> out [planes, ho, wo], out[oy, ox] = x[oy * h / ho, ox * w / wo] (floor).
template <class T>
void upsample_forward(const T* x, int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo, T* out) {
  std::vector<int64_t> src_x((size_t)wo);
  for (int64_t ox = 0; ox < wo; ++ox) src_x[(size_t)ox] = ox * w / wo;
  const int64_t rows = planes * ho;
  ThreadPool::global().parallel_for(rows, std::max<int64_t>(1, (1 << 14) / wo), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t pl = r / ho, oy = r % ho;
      const T* src = x + (pl * h + oy * h / ho) * w;
      T* dst = out + r * wo;
      for (int64_t ox = 0; ox < wo; ++ox) dst[ox] = src[src_x[(size_t)ox]];
    }
  });
}

}  // namespace

void CpuKernels::pool2d(PoolOp op, const Tensor& x, const Pool2dParams& p, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pool_forward(op, static_cast<const T*>(x.data()), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), p, out.dim(2),
                 out.dim(3), static_cast<T*>(out.data()));
  });
}

void CpuKernels::upsample_nearest2d(const Tensor& x, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    upsample_forward(static_cast<const T*>(x.data()), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), out.dim(2),
                     out.dim(3), static_cast<T*>(out.data()));
  });
}

}  // namespace rbee::cpu
