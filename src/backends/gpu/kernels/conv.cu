// GPU convolutions: conv1d/2d (im2col + GEMM), conv2d_fused (16-bit: the vendor convolution library of
// kernels/conv_dnn.cu (cuDNN) for the shapes it is chosen for, else the pipelined implicit GEMM of
// kernels/conv_implicit.cu for the shapes it is chosen for, else im2col + the vendor Blas's GEMM into f32 sums
// + an epilogue kernel where the Blas has a mixed-precision product (cuBLAS), else the implicit GEMM on matrix tiles
// of kernels/conv_igemm.cu; other dtypes or shapes: im2col + GEMM and the epilogue), conv_transpose1d/2d (GEMM +
// col2im) and the im2col op. NCHW / NCL, contiguous, floating dtypes; 1-D convolutions are 2-D ones of height 1.
//
// conv: per (image, group) the columns col [Cin/g * KH * KW, positions] hold the input under each kernel tap
// (zero in the padding; a 1x1 kernel with unit stride and no padding reads x itself), and
//   out[image, group] [Cout/g, positions] = w[group] [Cout/g, Cin/g * KH * KW] . col
// is one batched GEMM (gemm.h: the vendor Blas, or rbee's kernel) over (images, groups). The columns of a large
// call are built a few images, or a range of positions, at a time to bound the scratch memory. 16-bit inputs
// stay 16-bit in the columns (an exact copy); the GEMM sums in f32 and rounds once.
//
// conv_transpose: per (image, group) cols [Cout/g * KH * KW, H * W] = w[group]^T . x[group] (one batched GEMM in
// f32, or f64 for f64), then each output element gathers the column entries of the taps that reach it:
//   out[n, co, oy, ox] = sum over (ky, kx) with oy + ph - ky * dh = iy * sh, ox + pw - kx * dw = ix * sw of
//                        cols[n, co, ky, kx, iy, ix]
// and rounds once. 16-bit inputs are widened to f32 first, as the CPU does.
#include "backends/common/conv_geometry.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/conv_dnn.h"
#include "backends/gpu/kernels/conv_igemm.h"
#include "backends/gpu/kernels/conv_implicit.h"
#include "backends/gpu/kernels/gemm.h"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"

#include <cstdlib>
#include <string_view>

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
// Elements of the column scratch one step of a convolution may use (128 MiB of f32).
constexpr int64_t kColumnBudget = 1 << 25;
// Bytes of the 16-bit column scratch of one conv step (whole images while they fit, e.g. both CFG halves of SD's
// 960-channel 64x64 convolutions in one batched GEMM).
// RBEE_CONV_COLUMN_MB=N sets it to N MiB (A/B: columns small enough to stay in L2 between their write and the GEMM).
int64_t column_bytes16() {
  static const int64_t bytes = env::integer_or("RBEE_CONV_COLUMN_MB", 256, 1, 1 << 20) << 20;
  return bytes;
}
// Position chunks are multiples of this, so every row of the columns starts 16-byte aligned (16-bit tensor-core
// GEMM operands; odd row lengths send cuBLAS to much slower kernels).
constexpr int64_t kPositionAlign = 64;

// NCHW sizes of one call (conv_geometry.h): x [n, cin, h, w], out [n, cout, ho, wo], kernel kh x kw.
using conv::ConvGeometry;
using conv::geometry_1d;
using conv::geometry_2d;

// ---- conv: columns ----

// cols [imgs][groups][cin_g * kh * kw][count] for images img0.. and output positions q0 .. q0 + count.
template <class T>
__global__ void conv_columns_kernel(const T* x, ConvGeometry g, int64_t img0, int64_t imgs, int64_t q0, int64_t count,
                                    T* cols) {
  const int64_t taps = g.kh * g.kw, depth_all = g.cin * taps;  // channels of all groups, in order
  const int64_t total = imgs * depth_all * count;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t q = e % count, row = e / count % depth_all, img = e / (count * depth_all);
    const int64_t c = row / taps, ky = row % taps / g.kw, kx = row % g.kw;
    const int64_t pos = q0 + q, oy = pos / g.wo, ox = pos % g.wo;
    const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) cols[e] = x[(((img0 + img) * g.cin + c) * g.h + iy) * g.w + ix];
    else store(cols + e, compute_t<T>(0));
  }
}

// The same columns with a group of row_threads threads per (image, column row): blockIdx.z = image, rows
// blockIdx.y * rows_per_block + threadIdx.x / row_threads (channel, ky, kx; rows_per_block = blockDim.x /
// row_threads, row_threads a power of two dividing blockDim.x), and each thread kRowPer consecutive positions, so the
// row's index math is done once, the position math is 32-bit and incremental, and 16-bit columns are stored as
// 16-byte vectors when count is a multiple of kRowPer (every row then starts 16-byte aligned). Short rows (SD's 8x8
// and 16x16 maps: 64 and 256 positions) share a block: with one block a row, 248 of 256 threads idled on an 8x8 map
// and one columns launch cost about as much as the GEMM after it (docs/perf-notes/sd-speed.md, session 8, branch sdsmall). For calls
// whose sizes fit (fits_row_columns). Row `row` of image `img` starts at cols + img * img_stride + row * row_stride:
// [imgs][rows][count] (img_stride = rows * count, row_stride = count), or the split-K layout [rows][imgs * count]
// (img_stride = count, row_stride = imgs * count).
constexpr int kRowPer = 8;
template <class T>
__global__ void conv_row_columns_kernel(const T* x, ConvGeometry g, int64_t img0, int q0, int count,
                                        int64_t img_stride, int64_t row_stride, int rows, int row_threads, T* cols) {
  const int rows_per_block = (int)blockDim.x / row_threads, lane = (int)threadIdx.x % row_threads;
  const int row = (int)blockIdx.y * rows_per_block + (int)threadIdx.x / row_threads;
  if (row >= rows) return;
  const int taps = (int)(g.kh * g.kw), kw = (int)g.kw;
  const int c = row / taps, ky = row % taps / kw, kx = row % kw;
  const int h = (int)g.h, w = (int)g.w, wo = (int)g.wo;
  const int oy_off = ky * (int)g.dh - (int)g.ph, ox_off = kx * (int)g.dw - (int)g.pw, sh = (int)g.sh, sw = (int)g.sw;
  const T* xc = x + ((img0 + blockIdx.z) * g.cin + c) * g.h * g.w;
  T* dst = cols + (int64_t)blockIdx.z * img_stride + (int64_t)row * row_stride;
  const bool vec = sizeof(T) * kRowPer == 16 && count % kRowPer == 0 && img_stride % kRowPer == 0 &&
                   row_stride % kRowPer == 0;
  T zero;
  store(&zero, compute_t<T>(0));
  for (int q = ((int)blockIdx.x * row_threads + lane) * kRowPer; q < count;
       q += (int)gridDim.x * row_threads * kRowPer) {
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
bool fits_row_columns(const ConvGeometry& g, int64_t imgs, int64_t positions) {
  const int64_t lim = 0x7fffffff;
  return g.cin * g.kh * g.kw <= 65535 && imgs <= 65535 && positions <= lim - (1 << 20) && g.h * g.w <= lim &&
         g.kh * g.dh + g.ph <= lim && g.kw * g.dw + g.pw <= lim && g.ho * g.sh <= lim && g.wo * g.sw <= lim;
}

// RBEE_CONV_COLUMN_ROWS=1: one block per column row whatever its length (the launch before session 8; A/B).
bool one_row_per_block() {
  static const bool on = env::flag_or("RBEE_CONV_COLUMN_ROWS", false);
  return on;
}

// conv_row_columns_kernel over positions q0 .. q0 + count of images img0 .. img0 + imgs (every column row): each row
// gets the power of two of threads that covers its count at kRowPer positions a thread (up to a whole block), and
// a block as many rows as fit.
template <class T>
void launch_row_columns(GpuDevice& dev, const T* x, const ConvGeometry& g, int64_t img0, int64_t imgs, int64_t q0,
                        int64_t count, int64_t img_stride, int64_t row_stride, T* cols) {
  const int64_t rows = g.cin * g.kh * g.kw;
  const int row_threads =
      one_row_per_block() ? kThreads : (int)std::min<int64_t>(kThreads, pow2_ceil(ceil_div(count, kRowPer)));
  const int64_t rows_per_block = kThreads / row_threads;
  const dim3 grid((unsigned)std::min<int64_t>(ceil_div(count, (int64_t)row_threads * kRowPer), 64),
                  (unsigned)ceil_div(rows, rows_per_block), (unsigned)imgs);
  conv_row_columns_kernel<T><<<grid, kThreads, 0, dev.stream()>>>(x, g, img0, (int)q0, (int)count, img_stride,
                                                                  row_stride, (int)rows, row_threads, cols);
  RBEE_GPU_CHECK_LAUNCH();
}

// The GEMMs of conv_forward: in the operands' type, or (S = float for 16-bit T) f32 sums through the vendor Blas only,
// where a product it refuses returns false (before the first one, nothing was written).
template <class T, class S>
bool conv_gemm(GpuDevice& dev, const GemmSpec& s, bool first) {
  if constexpr (std::is_same_v<T, S>) {
    gemm(dev, s);
    return true;
  } else {
    if (gemm_blas(dev, s)) return true;
    RBEE_CHECK_CODE(first, ErrorCode::Internal, "conv2d_fused: the vendor Blas refused a product it took before");
    return false;
  }
}

// Split-K for 16-bit convolutions whose output is too small to fill the GPU (SD's 8x8 and 16x16 maps: 10-40 output
// tiles of 128 x 128 for 132 SMs, with K = Cin * 9 up to 23040): the number of K slices (1: no split). Taken only
// for groups 1, k x k kernels other than the plain 1x1 (those read x itself), columns of the whole call in one
// step, and slices of K that keep every slice's start 16-byte aligned (K / slices % 8 == 0).
int conv_split_slices(const GpuDevice& dev, const ConvGeometry& g) {
  const int64_t depth = g.cin * g.kh * g.kw, cols_n = g.n * g.ho * g.wo;
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  if (g.groups != 1 || pointwise || depth * cols_n * 2 > column_bytes16() || !fits_row_columns(g, g.n, g.ho * g.wo))
    return 1;
  const int64_t tiles = ceil_div(g.cout, 128) * ceil_div(cols_n, 128);
  const int64_t sms = std::max(1, dev.props().multiprocessors);
  int slices = 1;
  while (slices < 8 && tiles * slices * 2 <= sms && depth % (slices * 2 * 8) == 0 && depth / (slices * 2) >= 256)
    slices *= 2;
  return slices;
}

// out = conv(x, w) with S the type of out: T, or float for 16-bit T (f32 sums, vendor Blas only). False when the
// f32-sum product is not available (nothing written). slices > 1 (conv_split_slices; S = float): out holds that many
// partial sums over consecutive K ranges, [slices][cout][n][positions] (the epilogue adds them up and reorders).
template <class T, class S = T>
bool conv_forward(GpuDevice& dev, DType dtype, const T* x, const T* w, const ConvGeometry& g, S* out, int slices = 1) {
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
  const int64_t depth = cin_g * g.kh * g.kw, positions = g.ho * g.wo, plane = g.h * g.w;
  if (slices > 1) {
    // Columns [depth][n * positions] (all images side by side), then one strided-batched product over the slices:
    // out[s] [cout, n * positions] = w[:, s Ks .. (s + 1) Ks] . cols[s Ks .. (s + 1) Ks, :].
    const int64_t ks = depth / slices, cols_n = g.n * positions;
    const Tensor scratch = Tensor::empty({depth * cols_n}, dtype, dev);
    T* cols = static_cast<T*>(scratch.data());
    launch_row_columns<T>(dev, x, g, 0, g.n, 0, positions, positions, cols_n, cols);
    GemmSpec s;
    s.dtype = dtype;
    s.c_f32 = true;
    s.m = g.cout;
    s.n = cols_n;
    s.k = ks;
    s.batch_rank = 1;
    s.batch_shape[0] = slices;
    s.a = {const_cast<T*>(w), depth, 1, {ks}};
    s.b = {cols, cols_n, 1, {ks * cols_n}};
    s.c = {out, cols_n, 1, {g.cout * cols_n}};
    return conv_gemm<T, S>(dev, s, true);
  }
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;

  GemmSpec s;
  s.dtype = dtype;
  s.c_f32 = !std::is_same_v<T, S>;
  s.m = cout_g;
  s.k = depth;
  s.batch_rank = 2;  // (images, groups)
  s.a = {const_cast<T*>(w), depth, 1, {0, cout_g * depth}};
  if (pointwise) {
    s.n = positions;
    s.batch_shape[0] = g.n;
    s.batch_shape[1] = g.groups;
    s.b = {const_cast<T*>(x), plane, 1, {g.cin * plane, cin_g * plane}};
    s.c = {out, positions, 1, {g.cout * positions, cout_g * positions}};
    return conv_gemm<T, S>(dev, s, true);
  }
  const int64_t per_image = g.cin * g.kh * g.kw * positions;
  const int64_t budget = sizeof(T) == 2 ? column_bytes16() / 2 : kColumnBudget;
  int64_t imgs = 1, count = positions;
  if (per_image <= budget) {
    imgs = std::min(g.n, std::max<int64_t>(1, budget / per_image));
  } else {
    count = std::max<int64_t>(1, budget / (g.cin * g.kh * g.kw));
    if (count >= kPositionAlign) count -= count % kPositionAlign;
  }
  const Tensor scratch = Tensor::empty({imgs * g.cin * g.kh * g.kw * count}, dtype, dev);
  T* cols = static_cast<T*>(scratch.data());
  bool first = true;
  for (int64_t img0 = 0; img0 < g.n; img0 += imgs) {
    const int64_t ni = std::min(imgs, g.n - img0);
    for (int64_t q0 = 0; q0 < positions; q0 += count) {
      const int64_t nq = std::min(count, positions - q0);
      const int64_t total = ni * g.cin * g.kh * g.kw * nq;
      if (fits_row_columns(g, ni, positions)) {
        launch_row_columns<T>(dev, x, g, img0, ni, q0, nq, g.cin * g.kh * g.kw * nq, nq, cols);
      } else {
        conv_columns_kernel<T><<<grid_for(total, kThreads), kThreads, 0, dev.stream()>>>(x, g, img0, ni, q0, nq, cols);
        RBEE_GPU_CHECK_LAUNCH();
      }
      s.n = nq;
      s.batch_shape[0] = ni;
      s.batch_shape[1] = g.groups;
      s.b = {cols, nq, 1, {g.groups * depth * nq, depth * nq}};
      s.c = {out + img0 * g.cout * positions + q0, positions, 1, {g.cout * positions, cout_g * positions}};
      if (!conv_gemm<T, S>(dev, s, first)) return false;
      first = false;
    }
  }
  return true;
}

// ---- conv_transpose ----

template <class T, class C>
__global__ void widen_kernel(const T* src, int64_t n, C* dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    dst[i] = (C)load(src + i);
  }
}

// out [imgs][cout][ho][wo] (images img0..; output channels co0 .. co0 + co_count of each group) from
// cols [imgs][groups][co_count * kh * kw][h * w].
template <class T, class C>
__global__ void col2im_kernel(const C* cols, ConvGeometry g, int64_t img0, int64_t imgs, int64_t co0,
                              int64_t co_count, T* out) {
  const int64_t cout_g = g.cout / g.groups, taps = g.kh * g.kw, plane = g.h * g.w;
  const int64_t total = imgs * g.groups * co_count * g.ho * g.wo;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = e % g.wo, oy = e / g.wo % g.ho, cc = e / (g.wo * g.ho) % co_count;
    const int64_t gi = e / (g.wo * g.ho * co_count) % g.groups, img = e / (g.wo * g.ho * co_count * g.groups);
    const C* base = cols + ((img * g.groups + gi) * co_count + cc) * taps * plane;
    C acc = 0;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t ty = oy + g.ph - ky * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.h) continue;
      const int64_t iy = ty / g.sh;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t tx = ox + g.pw - kx * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.w) continue;
        acc += base[(ky * g.kw + kx) * plane + iy * g.w + tx / g.sw];
      }
    }
    const int64_t co = gi * cout_g + co0 + cc;
    store(out + (((img0 + img) * g.cout + co) * g.ho + oy) * g.wo + ox, (compute_t<T>)acc);
  }
}

template <class T>
void conv_transpose_forward(GpuDevice& dev, const T* x, const T* w, const ConvGeometry& g, T* out) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const DType cdtype = std::is_same_v<C, double> ? DType::F64 : DType::F32;
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups, taps = g.kh * g.kw, plane = g.h * g.w;

  // The operands in the GEMM's type: widened copies for 16-bit inputs.
  Tensor xw_store, ww_store;
  const C* xw = reinterpret_cast<const C*>(x);
  const C* ww = reinterpret_cast<const C*>(w);
  if constexpr (!std::is_same_v<T, C>) {
    const int64_t nx = g.n * g.cin * plane, nw = g.cin * cout_g * taps;
    xw_store = Tensor::empty({nx}, cdtype, dev);
    ww_store = Tensor::empty({nw}, cdtype, dev);
    widen_kernel<T, C><<<grid_for(nx, kThreads), kThreads, 0, dev.stream()>>>(x, nx, static_cast<C*>(xw_store.data()));
    RBEE_GPU_CHECK_LAUNCH();
    widen_kernel<T, C><<<grid_for(nw, kThreads), kThreads, 0, dev.stream()>>>(w, nw, static_cast<C*>(ww_store.data()));
    RBEE_GPU_CHECK_LAUNCH();
    xw = static_cast<const C*>(xw_store.data());
    ww = static_cast<const C*>(ww_store.data());
  }

  // Chunks: whole images while they fit the budget, else one image and a range of each group's channels.
  const int64_t per_image = g.cout * taps * plane;
  int64_t imgs = 1, co_count = cout_g;
  if (per_image <= kColumnBudget) imgs = std::min(g.n, std::max<int64_t>(1, kColumnBudget / per_image));
  else co_count = std::max<int64_t>(1, kColumnBudget / (g.groups * taps * plane));
  const Tensor scratch = Tensor::empty({imgs * g.groups * co_count * taps * plane}, cdtype, dev);
  C* cols = static_cast<C*>(scratch.data());

  GemmSpec s;
  s.dtype = cdtype;
  s.k = cin_g;
  s.n = plane;
  s.batch_rank = 2;  // (images, groups)
  for (int64_t img0 = 0; img0 < g.n; img0 += imgs) {
    const int64_t ni = std::min(imgs, g.n - img0);
    for (int64_t co0 = 0; co0 < cout_g; co0 += co_count) {
      const int64_t nc = std::min(co_count, cout_g - co0);
      // A = w[group]^T rows (co0 .. co0 + nc) * taps: w is [cin, cout_g * taps], so A is stored transposed.
      s.m = nc * taps;
      s.batch_shape[0] = ni;
      s.batch_shape[1] = g.groups;
      s.a = {const_cast<C*>(ww) + co0 * taps, 1, cout_g * taps, {0, cin_g * cout_g * taps}};
      s.b = {const_cast<C*>(xw) + img0 * g.cin * plane, plane, 1, {g.cin * plane, cin_g * plane}};
      s.c = {cols, plane, 1, {g.groups * nc * taps * plane, nc * taps * plane}};
      gemm(dev, s);
      const int64_t total = ni * g.groups * nc * g.ho * g.wo;
      col2im_kernel<T, C><<<grid_for(total, kThreads), kThreads, 0, dev.stream()>>>(cols, g, img0, ni, co0, nc, out);
      RBEE_GPU_CHECK_LAUNCH();
    }
  }
}

// ---- conv2d_fused fallback: epilogue ----

// out[img][co][q] = act(sum[img][co][q] + bias[img?][co] + residual[img][co][q]), rounded once; sum in S (f32 for
// 16-bit outputs, the output type itself otherwise; sum may alias out). One block row per (img, co) row of the output
// (grid.y strides over them), so the bias is read once per row and the row's elements are consecutive.
template <class T, class S>
__global__ void conv_epilogue_kernel(const S* sum, const T* bias, int64_t bias_img_stride, const T* residual, int silu,
                                     int64_t n, int64_t cout, int64_t positions, T* out) {
  using C = compute_t<T>;
  for (int64_t row = blockIdx.y; row < n * cout; row += gridDim.y) {
    const int64_t co = row % cout, img = row / cout, base = row * positions;
    const C b = bias ? (C)load(bias + img * bias_img_stride + co) : C(0);
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < positions; q += (int64_t)gridDim.x * blockDim.x) {
      C v = (C)sum[base + q];
      if (bias) v += b;
      if (residual) v += load(residual + base + q);
      if (silu) v = v / (C(1) + exp(-v));
      store(out + base + q, v);
    }
  }
}

// The launch of conv_epilogue_kernel for out [n, cout, positions].
template <class T, class S>
void conv_epilogue(GpuDevice& dev, const S* sum, const T* bias, int64_t bias_img_stride, const T* residual, bool silu,
                   int64_t n, int64_t cout, int64_t positions, T* out) {
  const dim3 grid((unsigned)std::min<int64_t>(ceil_div(positions, kThreads), 64),
                  (unsigned)std::min<int64_t>(n * cout, 65535));
  conv_epilogue_kernel<T, S><<<grid, kThreads, 0, dev.stream()>>>(sum, bias, bias_img_stride, residual, silu ? 1 : 0,
                                                                  n, cout, positions, out);
  RBEE_GPU_CHECK_LAUNCH();
}

// The split-K epilogue: out[img][co][q] = act(sum over s < slices of part[s][co][img][q] + bias + residual),
// rounded once (part from conv_forward with slices > 1). Same grid as conv_epilogue_kernel.
template <class T>
__global__ void conv_splitk_epilogue_kernel(const float* part, int slices, const T* bias, int64_t bias_img_stride,
                                            const T* residual, int silu, int64_t n, int64_t cout, int64_t positions,
                                            T* out) {
  using C = compute_t<T>;
  const int64_t slice_stride = cout * n * positions;
  for (int64_t row = blockIdx.y; row < n * cout; row += gridDim.y) {
    const int64_t co = row % cout, img = row / cout, base = row * positions;
    const float* src = part + (co * n + img) * positions;
    const C b = bias ? (C)load(bias + img * bias_img_stride + co) : C(0);
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < positions; q += (int64_t)gridDim.x * blockDim.x) {
      float acc = 0.f;
      for (int s = 0; s < slices; ++s) acc += src[s * slice_stride + q];
      C v = (C)acc;
      if (bias) v += b;
      if (residual) v += load(residual + base + q);
      if (silu) v = v / (C(1) + exp(-v));
      store(out + base + q, v);
    }
  }
}

// ---- im2col op ----

// out [n, ho * wo, c * kh * kw]: row (oy, ox), column (ci, ky, kx).
template <class T>
__global__ void im2col_kernel(const T* x, ConvGeometry g, T* out) {
  const int64_t row_len = g.cin * g.kh * g.kw, total = g.n * g.ho * g.wo * row_len;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t col = e % row_len, r = e / row_len;
    const int64_t img = r / (g.ho * g.wo), oy = r / g.wo % g.ho, ox = r % g.wo;
    const int64_t c = col / (g.kh * g.kw), ky = col / g.kw % g.kh, kx = col % g.kw;
    const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) out[e] = x[((img * g.cin + c) * g.h + iy) * g.w + ix];
    else store(out + e, compute_t<T>(0));
  }
}

}  // namespace

void GpuKernels::conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const ConvGeometry g = geometry_1d(x, w, out, p);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_forward<T>(device_, x.dtype(), static_cast<const T*>(x.data()),
                    static_cast<const T*>(w.data()), g, static_cast<T*>(out.data()));
  });
}

void GpuKernels::conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const ConvGeometry g = geometry_2d(x, w, out, p);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_forward<T>(device_, x.dtype(), static_cast<const T*>(x.data()),
                    static_cast<const T*>(w.data()), g, static_cast<T*>(out.data()));
  });
}

namespace {
// RBEE_CONV_SPLIT_K=0: no split-K on the im2col + Blas path (A/B).
bool conv_split_k_enabled() {
  static const bool on = env::flag_or("RBEE_CONV_SPLIT_K", true);
  return on;
}
}  // namespace

void GpuKernels::conv2d_fused(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                              const Conv2dParams& p, bool silu, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  // 16-bit: im2col + the vendor Blas's tensor-core GEMM into an f32 sum + the epilogue, where the Blas takes mixed
  // precision (cuBLAS: 4-5x the implicit GEMM's speed on SD's convolutions, H100); else the implicit GEMM on the
  // matrix-tile wrappers (rocBLAS, no Blas); else f32 GEMMs. RBEE_CONV_IGEMM=1 prefers the implicit GEMM (A/B).
  static const bool igemm_first = env::flag_or("RBEE_CONV_IGEMM", false);
  const bool half = x.dtype() == DType::F16 || x.dtype() == DType::BF16;
  if (half && igemm_first && conv2d_igemm(device_, x, w, bias, residual, p, silu, out)) return;
  // The vendor convolution library (conv_dnn.cu: cuDNN; RBEE_CONV_CUDNN=0 skips it) where it is chosen for the shape.
  if (half && conv2d_dnn(device_, x, w, bias, residual, p, silu, out)) return;
  // The pipelined implicit GEMM (conv_implicit.cu; RBEE_CONV_IMPLICIT=0 skips it) where it is chosen for the shape.
  if (half && conv2d_implicit(device_, x, w, bias, residual, p, silu, out)) return;
  const ConvGeometry g = geometry_2d(x, w, out, p);
  if (half && device_.blas()) {
    bool done = false;
    visit_float_storage(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, compute_t<T>>) {
        const int slices = conv_split_k_enabled() ? conv_split_slices(device_, g) : 1;
        const Tensor sum = Tensor::empty({out.numel() * slices}, DType::F32, device_);
        float* sf = static_cast<float*>(sum.data());
        if (!conv_forward<T, float>(device_, x.dtype(), static_cast<const T*>(x.data()),
                                    static_cast<const T*>(w.data()), g, sf, slices))
          return;
        const T* bp = bias ? static_cast<const T*>(bias->data()) : nullptr;
        const int64_t bstride = bias && bias->rank() == 2 ? g.cout : 0;
        const T* rp = residual ? static_cast<const T*>(residual->data()) : nullptr;
        T* op = static_cast<T*>(out.data());
        if (slices > 1) {
          const int64_t positions = g.ho * g.wo;
          const dim3 grid((unsigned)std::min<int64_t>(ceil_div(positions, kThreads), 64),
                          (unsigned)std::min<int64_t>(g.n * g.cout, 65535));
          conv_splitk_epilogue_kernel<T><<<grid, kThreads, 0, device_.stream()>>>(
              sf, slices, bp, bstride, rp, silu ? 1 : 0, g.n, g.cout, positions, op);
          RBEE_GPU_CHECK_LAUNCH();
        } else {
          conv_epilogue<T, float>(device_, sf, bp, bstride, rp, silu, g.n, g.cout, g.ho * g.wo, op);
        }
        done = true;
      }
    });
    if (done) return;
  }
  if (!igemm_first && conv2d_igemm(device_, x, w, bias, residual, p, silu, out)) return;
  // im2col + GEMM into an f32 (f64) sum, then the epilogue rounds once.
  const int64_t total = out.numel(), positions = g.ho * g.wo;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* bp = bias ? static_cast<const T*>(bias->data()) : nullptr;
    const int64_t bstride = bias && bias->rank() == 2 ? g.cout : 0;
    const T* rp = residual ? static_cast<const T*>(residual->data()) : nullptr;
    T* op = static_cast<T*>(out.data());
    if constexpr (std::is_same_v<T, C>) {
      conv_forward<T>(device_, x.dtype(), static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g, op);
      conv_epilogue<T, T>(device_, op, bp, bstride, rp, silu, g.n, g.cout, positions, op);
    } else {
      const int64_t nx = x.numel(), nw = w.numel();
      const Tensor xw = Tensor::empty({nx}, DType::F32, device_), ww = Tensor::empty({nw}, DType::F32, device_);
      const Tensor sum = Tensor::empty({total}, DType::F32, device_);
      float* xf = static_cast<float*>(xw.data());
      float* wf = static_cast<float*>(ww.data());
      float* sf = static_cast<float*>(sum.data());
      widen_kernel<T, float><<<grid_for(nx, kThreads), kThreads, 0, device_.stream()>>>(
          static_cast<const T*>(x.data()), nx, xf);
      RBEE_GPU_CHECK_LAUNCH();
      widen_kernel<T, float><<<grid_for(nw, kThreads), kThreads, 0, device_.stream()>>>(
          static_cast<const T*>(w.data()), nw, wf);
      RBEE_GPU_CHECK_LAUNCH();
      conv_forward<float>(device_, DType::F32, xf, wf, g, sf);
      conv_epilogue<T, float>(device_, sf, bp, bstride, rp, silu, g.n, g.cout, positions, op);
    }
  });
}

void GpuKernels::conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const ConvGeometry g = geometry_1d(x, w, out, p);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_transpose_forward<T>(device_, static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g,
                              static_cast<T*>(out.data()));
  });
}

void GpuKernels::conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const ConvGeometry g = geometry_2d(x, w, out, p);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_transpose_forward<T>(device_, static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g,
                              static_cast<T*>(out.data()));
  });
}

void GpuKernels::im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p, Tensor& out) {
  device_.activate();
  const int64_t total = out.numel();
  if (total == 0) return;
  const ConvGeometry g = conv::geometry_im2col(x, kernel_h, kernel_w, p);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(static_cast<const T*>(x.data()), g,
                                                                                  static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
