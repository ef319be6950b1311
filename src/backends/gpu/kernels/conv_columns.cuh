// The im2col columns of a 16-bit (or any floating) NCHW convolution, shared by conv.cu's im2col + GEMM paths and
// conv_fused_gemm.cu: the scratch budget and the row-per-block columns kernel. Geometry: conv_geometry.h.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/common/conv_geometry.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

// Bytes of the 16-bit column scratch of one conv step (whole images while they fit, e.g. both CFG halves of SD's
// 960-channel 64x64 convolutions in one batched GEMM).
// RBEE_CONV_COLUMN_MB=N sets it to N MiB (A/B: columns small enough to stay in L2 between their write and the GEMM).
inline int64_t column_bytes16() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("RBEE_CONV_COLUMN_MB");
    const long mb = env ? std::strtol(env, nullptr, 10) : 0;
    return mb > 0 ? int64_t{mb} << 20 : int64_t{256} << 20;
  }();
  return bytes;
}

// The columns cols[img][row][q] (row = channel, ky, kx; q an output position; zero in the padding) with one block
// row per (image, column row): blockIdx.z = image, blockIdx.y = row, and each thread kRowPer consecutive
// positions, so the row's index math is done once, the position math is 32-bit and incremental, and 16-bit columns
// are stored as 16-byte vectors when count is a multiple of kRowPer (every row then starts 16-byte aligned). For
// calls whose sizes fit (fits_row_columns). Row `row` of image `img` starts at cols + img * img_stride + row *
// row_stride: [imgs][rows][count] (img_stride = rows * count, row_stride = count), or the split-K layout
// [rows][imgs * count] (img_stride = count, row_stride = imgs * count).
inline constexpr int kRowPer = 8;
template <class T>
__global__ void conv_row_columns_kernel(const T* x, conv::ConvGeometry g, int64_t img0, int q0, int count,
                                        int64_t img_stride, int64_t row_stride, T* cols) {
  const int taps = (int)(g.kh * g.kw), row = (int)blockIdx.y, kw = (int)g.kw;
  const int c = row / taps, ky = row % taps / kw, kx = row % kw;
  const int h = (int)g.h, w = (int)g.w, wo = (int)g.wo;
  const int oy_off = ky * (int)g.dh - (int)g.ph, ox_off = kx * (int)g.dw - (int)g.pw, sh = (int)g.sh, sw = (int)g.sw;
  const T* xc = x + ((img0 + blockIdx.z) * g.cin + c) * g.h * g.w;
  T* dst = cols + (int64_t)blockIdx.z * img_stride + (int64_t)row * row_stride;
  const bool vec = sizeof(T) * kRowPer == 16 && count % kRowPer == 0 && img_stride % kRowPer == 0 &&
                   row_stride % kRowPer == 0;
  T zero;
  store(&zero, compute_t<T>(0));
  for (int q = (int)(blockIdx.x * blockDim.x + threadIdx.x) * kRowPer; q < count;
       q += (int)(gridDim.x * blockDim.x) * kRowPer) {
    const int pos = q0 + q;
    int oy = pos / wo, ox = pos - oy * wo;
    T v[kRowPer];
#pragma unroll
    for (int k = 0; k < kRowPer; ++k) {
      const int iy = oy * sh + oy_off, ix = ox * sw + ox_off;
      v[k] = iy >= 0 && iy < h && ix >= 0 && ix < w ? xc[iy * w + ix] : zero;
      if (++ox == wo) {
        ox = 0;
        ++oy;
      }
    }
    if (vec) {
      Bytes16 raw;
      memcpy(&raw, v, 16);
      *reinterpret_cast<Bytes16*>(dst + q) = raw;
    } else {
#pragma unroll
      for (int k = 0; k < kRowPer; ++k)
        if (q + k < count) dst[q + k] = v[k];
    }
  }
}

// Whether conv_row_columns_kernel takes a step of `imgs` images and positions up to `positions`.
inline bool fits_row_columns(const conv::ConvGeometry& g, int64_t imgs, int64_t positions) {
  const int64_t lim = 0x7fffffff;
  return g.cin * g.kh * g.kw <= 65535 && imgs <= 65535 && positions <= lim - (1 << 20) && g.h * g.w <= lim &&
         g.kh * g.dh + g.ph <= lim && g.kw * g.dw + g.pw <= lim && g.ho * g.sh <= lim && g.wo * g.sw <= lim;
}

}  // namespace rbee::gpu
