// CPU convolutions: conv1d, conv2d, conv2d_fused and the im2col op.
//
// A convolution is, per (image, group) and per tile of output positions, a column packing of the input
// (conv_columns.h) followed by one GEMM (conv_gemm.h):
//   out[g] [Cout/g, tile] = w[g] [Cout/g, Cin/g * KH * KW] . col [Cin/g * KH * KW, tile]
// Tiles of all images and groups run in parallel on the global ThreadPool. F16/BF16 inputs are widened to f32
// once up front and results rounded once when stored; F32 and F64 run in their own precision.
#include <cmath>
#include <memory>
#include <vector>

#include "backends/common/conv_geometry.h"
#include "backends/cpu/conv_columns.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

using ::rbee::conv::ConvGeometry;
using ::rbee::conv::geometry_1d;
using ::rbee::conv::geometry_2d;
using conv::Tap;

// conv2d_fused's epilogue on the f32 (f64) sum v of output element (img, co, position q): + bias, + residual, silu.
// The default (no bias, no residual, no silu) is the plain convolution.
template <class T>
struct Epilogue {
  const T* bias = nullptr;  // [cout] (bias_img_stride 0) or [n, cout] (bias_img_stride cout)
  int64_t bias_img_stride = 0;
  const T* residual = nullptr;  // [n, cout, positions]
  bool silu = false;

  bool active() const { return bias || residual || silu; }
  template <class C>
  C operator()(C v, int64_t img, int64_t co, int64_t cout, int64_t positions, int64_t q) const {
    if (bias) v += (C)load(bias[img * bias_img_stride + co]);
    if (residual) v += (C)load(residual[(img * cout + co) * positions + q]);
    if (silu) v = v / (C(1) + std::exp(-v));
    return v;
  }
};

// x [n, cin, h, w], w [cout, cin / groups, kh, kw] -> out [n, cout, ho, wo] = epi(conv), all contiguous.
template <class T>
void conv_forward(const T* x, const T* w, const ConvGeometry& g, T* out, const Epilogue<T>& epi = {}) {
  using C = compute_t<T>;
  constexpr bool kNative = std::is_same_v<T, C>;  // F32/F64: the GEMM writes into out directly
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
  const int64_t depth = cin_g * g.kh * g.kw, positions = g.ho * g.wo, plane = g.h * g.w;

  std::vector<Tap> taps;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    for (int64_t kx = 0; kx < g.kw; ++kx) taps.push_back({ky * g.dh - g.ph, kx * g.dw - g.pw});
  }
  // Weights as stored: row co of group gi is wc + (gi * cout_g + co) * depth, columns (ci, ky, kx).
  const conv::Widened<T> xw(x, g.n * g.cin * plane), ww(w, g.cout * depth);
  const C* xc = xw.data();
  const C* wc = ww.data();
  // A 1x1 kernel with unit stride and no padding reads x itself as the column matrix.
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;

  const int64_t tile = conv::column_tile(positions, depth, g.n * g.groups);
  const int64_t tiles = (positions + tile - 1) / tile;
  ThreadPool::global().parallel_for(g.n * g.groups * tiles, 1, [&](int64_t begin, int64_t end) {
    std::unique_ptr<C[]> col(pointwise ? nullptr : new C[(size_t)(depth * tile)]);
    std::unique_ptr<C[]> acc(kNative ? nullptr : new C[(size_t)(cout_g * tile)]);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t img = task / (g.groups * tiles), gi = task / tiles % g.groups;
      const int64_t q0 = task % tiles * tile, count = std::min(tile, positions - q0);
      const C* xg = xc + (img * g.cin + gi * cin_g) * plane;
      T* og = out + (img * g.cout + gi * cout_g) * positions;
      const C* b = xg + q0;
      int64_t ldb = plane;
      if (!pointwise) {
        conv::pack_columns(conv::ColumnSource<C>{xg, cin_g, g.h, g.w, g.sh, g.sw, g.wo, taps}, q0, count, col.get());
        b = col.get(), ldb = count;
      }
      const C* a = wc + gi * cout_g * depth;
      if constexpr (kNative) {
        conv_gemm(cout_g, count, depth, a, depth, b, ldb, og + q0, positions);
        if (epi.active()) {
          for (int64_t c = 0; c < cout_g; ++c) {
            const int64_t co = gi * cout_g + c;
            T* o = og + c * positions + q0;
            for (int64_t j = 0; j < count; ++j) o[j] = epi(o[j], img, co, g.cout, positions, q0 + j);
          }
        }
      } else {
        conv_gemm(cout_g, count, depth, a, depth, b, ldb, acc.get(), count);
        for (int64_t c = 0; c < cout_g; ++c) {
          const int64_t co = gi * cout_g + c;
          const C* r = acc.get() + c * count;
          T* o = og + c * positions + q0;
          if (epi.active()) {
            for (int64_t j = 0; j < count; ++j) o[j] = store<T>(epi(r[j], img, co, g.cout, positions, q0 + j));
          } else {
            for (int64_t j = 0; j < count; ++j) o[j] = store<T>(r[j]);
          }
        }
      }
    }
  });
}

// x [n, c, h, w] -> out [n, ho * wo, c * kh * kw]: row (oy, ox), column (ci, ky, kx) holds
// x[ci, oy * sh - ph + ky * dh, ox * sw - pw + kx * dw], zero outside the image.
template <class T>
void im2col_forward(const T* x, const ConvGeometry& g, T* out) {
  const int64_t row_len = g.cin * g.kh * g.kw;
  const int64_t rows = g.n * g.ho * g.wo;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(row_len, 1));
  ThreadPool::global().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t img = r / (g.ho * g.wo), oy = r / g.wo % g.ho, ox = r % g.wo;
      T* dst = out + r * row_len;
      for (int64_t c = 0; c < g.cin; ++c) {
        const T* plane = x + (img * g.cin + c) * g.h * g.w;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          for (int64_t kx = 0; kx < g.kw; ++kx, ++dst) {
            const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
            *dst = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? plane[iy * g.w + ix] : T(0.0f);
          }
        }
      }
    }
  });
}

}  // namespace

void CpuKernels::conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) {
  const ConvGeometry g = geometry_1d(x, w, out, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_forward(static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g, static_cast<T*>(out.data()));
  });
}

void CpuKernels::conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) {
  const ConvGeometry g = geometry_2d(x, w, out, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_forward(static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g, static_cast<T*>(out.data()));
  });
}

void CpuKernels::conv2d_fused(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                              const Conv2dParams& p, bool silu, Tensor& out) {
  const ConvGeometry g = geometry_2d(x, w, out, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Epilogue<T> epi;
    if (bias) {
      epi.bias = static_cast<const T*>(bias->data());
      epi.bias_img_stride = bias->rank() == 2 ? g.cout : 0;
    }
    if (residual) epi.residual = static_cast<const T*>(residual->data());
    epi.silu = silu;
    conv_forward(static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g, static_cast<T*>(out.data()),
                 epi);
  });
}

void CpuKernels::im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p, Tensor& out) {
  const ConvGeometry g = ::rbee::conv::geometry_im2col(x, kernel_h, kernel_w, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    im2col_forward(static_cast<const T*>(x.data()), g, static_cast<T*>(out.data()));
  });
}

}  // namespace rbee::cpu
