// Implicit-GEMM convolutions on 16-bit matrix tiles with an asynchronous-copy pipeline (contract: conv_implicit.h).
//
// The product, per call: out[co][np] = sum_k A[co][k] . B[k][np], np = image * Ho * Wo + position (all images, e.g.
// both CFG halves, form one GEMM), f32 sums on the mma_* tiles of backends/gpu/platform.h, the epilogue
// (+ bias[image?][co] + residual[image][co][position], silu) on the f32 sum, rounded once and written NCHW.
// Two operand layouts, so that every 16-byte piece of a K step is one contiguous 16-byte global load (copy_async_16):
//  - kernel taps (any KH x KW, stride, padding): channels in chunks of CC (32 where Cin % 32 == 0, else 8), and
//    k = (chunk * KH * KW + ky * KW + kx) * CC + c (ci = chunk * CC + c): consecutive K steps walk the taps of one
//    chunk, whose input windows overlap, so their copies (copy_async_16_l1) mostly hit L1. x is first copied to
//    NHWC ([N, H, W, Cin], one read and one write of x instead of im2col's KH * KW-fold columns), w to that K order
//    ([Cout, Cin / CC, KH, KW, CC]; both in scratch from the caching allocator); B[k][np] =
//    x_nhwc[image][oy * sh - ph + ky][ox * sw - pw + kx][ci] (zero outside the image), held in shared memory as rows
//    of positions ([n][k], mma_load_b_nk). Needs Cin % 8 == 0 (a 16-byte piece never crosses a tap).
//  - pointwise (1x1, stride 1, no padding): k = ci, B[k][np] = x[image][ci][position] read from NCHW as it is
//    (rows of k, [k][n], mma_load_b_kn) and A = w itself; no copies. Needs Ho * Wo % 8 == 0 (a piece never crosses
//    an image) and 16-byte aligned x and w.
// Tiles: block 128 or 64 (Cout) x 128 (positions), 4 warps of 64 or 32 x 64 (4 or 2 x 4 tiles of 16 x 16), K steps
// of 32; kStages shared-memory stages (A and B slices of one K step each) filled by copy_async_16 kStages - 1 steps
// ahead of the step being multiplied, one barrier per step. Grid and scratch depend only on shapes: graph-capturable.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/conv_implicit.h"
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

// Block tile BM (Cout: 128, or 64 where a 128-row tile would be half empty, e.g. Cout 320) x kBN (positions).
constexpr int kBN = 128, kBK = 32;
constexpr int kWarpsM = 2, kWarpsN = 2, kWarps = kWarpsM * kWarpsN;
constexpr int kNT = kBN / kWarpsN / 16;  // 16 x 16 tiles per warp along positions: 4 (and BM / 32 along Cout)
constexpr int kThreads = kWarps * RBEE_DEVICE_WARP_SIZE;
// HIP's copy_async_16 is a plain load and store (complete on return), so stages past 2 would only cost LDS.
#if defined(RBEE_GPU_HIP)
constexpr int kStages = 2;
#else
constexpr int kStages = 4;
#endif
constexpr int kLd = kBK + 8;     // [rows][k] tiles (A, and B of the tap layout): 16-bit elements per row
constexpr int kLdKn = kBN + 8;   // [k][n] B tile of the pointwise layout
constexpr int kBElemsTaps = kBN * kLd, kBElemsPointwise = kBK * kLdKn;
constexpr int kPieces = kBN * kBK / 8;  // 16-byte pieces of either B slice per K step
static_assert(kPieces % kThreads == 0 && kThreads % 16 == 0, "piece split");
constexpr int kPer = kPieces / kThreads;  // B pieces per thread per step (A: kPer * BM / kBN)

template <bool kPointwise, int BM>
constexpr int stage_elems() {
  return BM * kLd + (kPointwise ? kBElemsPointwise : kBElemsTaps);
}
template <bool kPointwise, int BM>
constexpr int smem_bytes() {
  return kStages * stage_elems<kPointwise, BM>() * 2;
}

struct ImplicitParams {
  const uint16_t* x;         // taps: x_nhwc [n, h, w, cin]; pointwise: x [n, cin, positions]
  const uint16_t* wt;        // [cout, K], k = (ky * kw + kx) * cin + ci
  const uint16_t* bias;      // [cout] or [n, cout] (bias_img_stride cout) or null
  const uint16_t* residual;  // [n, cout, positions] or null
  uint16_t* out;             // [n, cout, positions]
  int n, cin, h, w, cout, ho, wo, kw, sh, sw, ph, pw;
  int taps, cc;  // kernel taps (KH * KW) and the channel chunk CC of the K order (32 or 8)
  int K, positions, np_total, bias_img_stride;
  int silu;
};

template <MmaElem E>
__device__ __forceinline__ float elem_to_float(uint16_t b) {
  if constexpr (E == MmaElem::BF16) return bf16_to_float(b);
  else return f16_to_float(b);
}
template <MmaElem E>
__device__ __forceinline__ uint16_t float_to_elem(float f) {
  if constexpr (E == MmaElem::BF16) return float_to_bf16(f);
  else return float_to_f16(f);
}

template <MmaElem E, bool kPointwise, int BM>
__global__ void __launch_bounds__(kThreads) conv_implicit_kernel(ImplicitParams p) {
  extern __shared__ float4 smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  constexpr int kStage = stage_elems<kPointwise, BM>(), kAElems = BM * kLd;
  constexpr int kMT = BM / kWarpsM / 16, kPerA = kPer * BM / kBN;
  static_assert(kPerA >= 1, "A split");
  const int tid = (int)threadIdx.x, warp = tid / RBEE_DEVICE_WARP_SIZE;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int m0 = (int)blockIdx.y * BM, n0 = (int)blockIdx.x * kBN;
  const int steps = (p.K + kBK - 1) / kBK;

  // A pieces: row tid / 4 + i * kThreads / 4, k column (tid % 4) * 8 of the step.
  const int a_kc = (tid % 4) * 8, a_row0 = tid / 4;
  // B pieces, taps layout: position row tid / 4 + i * kThreads / 4, k column (tid % 4) * 8 (same as A);
  // pointwise layout: k row tid / 16 + i * kThreads / 16, positions (tid % 16) * 8 .. + 7.
  int b_off[kPer];  // taps: element offset of image in x_nhwc; pointwise: of (image, 0, q) in x
  int b_iy0[kPer], b_ix0[kPer];
  bool b_ok[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if constexpr (kPointwise) {
      const int np = n0 + (tid % 16) * 8;
      b_ok[i] = np < p.np_total;
      const int img = b_ok[i] ? np / p.positions : 0, q = b_ok[i] ? np - img * p.positions : 0;
      b_off[i] = img * p.cin * p.positions + q;
      b_iy0[i] = b_ix0[i] = 0;
    } else {
      const int np = n0 + a_row0 + i * (kThreads / 4);
      b_ok[i] = np < p.np_total;
      const int img = b_ok[i] ? np / p.positions : 0, q = b_ok[i] ? np - img * p.positions : 0;
      const int oy = q / p.wo, ox = q - oy * p.wo;
      b_iy0[i] = oy * p.sh - p.ph;
      b_ix0[i] = ox * p.sw - p.pw;
      b_off[i] = img * p.h * p.w * p.cin;
    }
  }
  // Taps layout: this thread's k = step * kBK + a_kc as (chunk, tap, c) with CC = p.cc, advanced one step (4
  // pieces of 8) at a time: c stays, the tap moves by 4 / (CC / 8).
  const int taps = p.taps, pp = p.cc / 8, t_c = (a_kc / 8 % pp) * 8, t_step = 4 / pp;
  int t_tap = a_kc / 8 / pp % taps, t_ch = a_kc / 8 / pp / taps * p.cc + t_c;  // t_ch: channel of the piece

  // Issues the copies of K step `step` into stage `stage` (taps layout: t_* must describe that step).
  auto load_step = [&](int step, int stage) {
    uint16_t* as = smem + stage * kStage;
    uint16_t* bs = as + kAElems;
    const int k0 = step * kBK;
#pragma unroll
    for (int i = 0; i < kPerA; ++i) {
      const int row = a_row0 + i * (kThreads / 4), co = m0 + row, k = k0 + a_kc;
      const bool ok = co < p.cout && k < p.K;
      copy_async_16(as + row * kLd + a_kc, ok ? p.wt + (int64_t)co * p.K + k : p.wt, ok);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if constexpr (kPointwise) {
        const int kr = tid / 16 + i * (kThreads / 16), c = k0 + kr;
        const bool ok = b_ok[i] && c < p.K;
        copy_async_16(bs + kr * kLdKn + (tid % 16) * 8, ok ? p.x + b_off[i] + (int64_t)c * p.positions : p.x, ok);
      } else {
        const int row = a_row0 + i * (kThreads / 4);
        const int t_ky = t_tap / p.kw, iy = b_iy0[i] + t_ky, ix = b_ix0[i] + t_tap - t_ky * p.kw;
        const bool ok = b_ok[i] && k0 + a_kc < p.K && iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
        copy_async_16_l1(bs + row * kLd + a_kc, ok ? p.x + b_off[i] + (iy * p.w + ix) * p.cin + t_ch : p.x, ok);
      }
    }
    if constexpr (!kPointwise) {
      t_tap += t_step;
      while (t_tap >= taps) {
        t_tap -= taps;
        t_ch += p.cc;
      }
    }
  };

  MmaAcc acc[kMT][kNT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mma_zero(acc[mt][nt]);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_step(s, s);
    copy_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    copy_async_wait_pending<kStages - 2>();
    __syncthreads();  // step's stage landed for everyone; the stage refilled below was consumed at step - 1
    if (step + kStages - 1 < steps) load_step(step + kStages - 1, (step + kStages - 1) % kStages);
    copy_async_commit();
    const uint16_t* as = smem + (step % kStages) * kStage;
    const uint16_t* bs = as + kAElems;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      MmaA a[kMT];
      MmaB b[kNT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_load_a(a[mt], as + (wm * kMT * 16 + mt * 16) * kLd + kk, kLd);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        if constexpr (kPointwise) mma_load_b_kn(b[nt], bs + kk * kLdKn + wn * kNT * 16 + nt * 16, kLdKn);
        else mma_load_b_nk(b[nt], bs + (wn * kNT * 16 + nt * 16) * kLd + kk, kLd);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mma<E>(acc[mt][nt], a[mt], b[nt]);
    }
  }
  copy_async_wait_all();  // no copy may be left in flight when the block ends (only empty groups remain)

  // Epilogue. Column facts (image, offset) once per (nt, i); two adjacent columns of one row (elements i, i + 1 for
  // even i where mma_acc_row / mma_acc_col say so: CUDA's layout) in one image at an even offset are read and
  // written as one 4-byte word.
  static_assert(kMmaAccPerLane % 2 == 0, "element pairs");
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    int c_off[kMmaAccPerLane], c_img[kMmaAccPerLane];
    bool c_ok[kMmaAccPerLane];
#pragma unroll
    for (int i = 0; i < kMmaAccPerLane; ++i) {
      const int np = n0 + wn * kNT * 16 + nt * 16 + mma_acc_col(i);
      c_ok[i] = np < p.np_total;
      c_img[i] = c_ok[i] ? np / p.positions : 0;
      c_off[i] = c_img[i] * p.cout * p.positions + (np - c_img[i] * p.positions);
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < kMmaAccPerLane; i += 2) {
        const int co0 = m0 + wm * kMT * 16 + mt * 16 + mma_acc_row(i);
        const int co1 = m0 + wm * kMT * 16 + mt * 16 + mma_acc_row(i + 1);
        const int o0 = c_off[i] + co0 * p.positions, o1 = c_off[i + 1] + co1 * p.positions;
        const bool ok0 = c_ok[i] && co0 < p.cout, ok1 = c_ok[i + 1] && co1 < p.cout;
        float v0 = acc[mt][nt].v[i], v1 = acc[mt][nt].v[i + 1];
        if (ok0 && ok1 && o1 == o0 + 1 && o0 % 2 == 0) {
          if (p.bias) {
            v0 += elem_to_float<E>(p.bias[c_img[i] * p.bias_img_stride + co0]);
            v1 += elem_to_float<E>(p.bias[c_img[i + 1] * p.bias_img_stride + co1]);
          }
          if (p.residual) {
            const uint32_t r = *reinterpret_cast<const uint32_t*>(p.residual + o0);
            v0 += elem_to_float<E>((uint16_t)(r & 0xffffu));
            v1 += elem_to_float<E>((uint16_t)(r >> 16));
          }
          if (p.silu) {
            v0 = v0 / (1.f + expf(-v0));
            v1 = v1 / (1.f + expf(-v1));
          }
          *reinterpret_cast<uint32_t*>(p.out + o0) =
              (uint32_t)float_to_elem<E>(v0) | (uint32_t)float_to_elem<E>(v1) << 16;
          continue;
        }
        if (ok0) {
          if (p.bias) v0 += elem_to_float<E>(p.bias[c_img[i] * p.bias_img_stride + co0]);
          if (p.residual) v0 += elem_to_float<E>(p.residual[o0]);
          if (p.silu) v0 = v0 / (1.f + expf(-v0));
          p.out[o0] = float_to_elem<E>(v0);
        }
        if (ok1) {
          if (p.bias) v1 += elem_to_float<E>(p.bias[c_img[i + 1] * p.bias_img_stride + co1]);
          if (p.residual) v1 += elem_to_float<E>(p.residual[o1]);
          if (p.silu) v1 = v1 / (1.f + expf(-v1));
          p.out[o1] = float_to_elem<E>(v1);
        }
      }
  }
}

// x [n][c][hw] -> x_nhwc [n][hw][c], 16-bit, through 32 x 32 shared tiles (blockIdx.z = image).
__global__ void nchw_to_nhwc_kernel(const uint16_t* x, int c, int hw, uint16_t* out) {
  __shared__ uint16_t tile[32][33];
  const int hw0 = (int)blockIdx.x * 32, c0 = (int)blockIdx.y * 32;
  const uint16_t* src = x + (int64_t)blockIdx.z * c * hw;
  uint16_t* dst = out + (int64_t)blockIdx.z * c * hw;
  for (int r = (int)threadIdx.y; r < 32; r += (int)blockDim.y) {
    const int ci = c0 + r, q = hw0 + (int)threadIdx.x;
    if (ci < c && q < hw) tile[r][threadIdx.x] = src[(int64_t)ci * hw + q];
  }
  __syncthreads();
  for (int r = (int)threadIdx.y; r < 32; r += (int)blockDim.y) {
    const int q = hw0 + r, ci = c0 + (int)threadIdx.x;
    if (ci < c && q < hw) dst[(int64_t)q * c + ci] = tile[threadIdx.x][r];
  }
}

// w [cout][cin][taps] -> [cout][cin / cc][taps][cc] (the K order of the taps layout), 16-bit; one block row per
// output channel (grid.y strides over them), K = cin * taps < 2^31.
__global__ void weight_taps_kernel(const uint16_t* w, int cout, int cin, int taps, int cc, uint16_t* out) {
  const int K = cin * taps;
  for (int co = (int)blockIdx.y; co < cout; co += (int)gridDim.y) {
    const uint16_t* src = w + (int64_t)co * K;
    uint16_t* dst = out + (int64_t)co * K;
    for (int j = (int)(blockIdx.x * blockDim.x + threadIdx.x); j < K; j += (int)(gridDim.x * blockDim.x)) {
      const int c = j % cc, t = j / cc % taps, chunk = j / (cc * taps);
      dst[j] = src[(chunk * cc + c) * taps + t];
    }
  }
}

// Launches the kernel with its dynamic shared memory, opting in above 48 KiB (once per kernel and device).
template <MmaElem E, bool kPointwise, int BM>
void launch_implicit_bm(GpuDevice& dev, const ImplicitParams& p) {
  constexpr int smem = smem_bytes<kPointwise, BM>();
  static std::atomic<uint64_t> opted{0};
  opt_in_dynamic_smem(dev, reinterpret_cast<const void*>(&conv_implicit_kernel<E, kPointwise, BM>), smem, opted);
  const dim3 grid((unsigned)((p.np_total + kBN - 1) / kBN), (unsigned)((p.cout + BM - 1) / BM));
  conv_implicit_kernel<E, kPointwise, BM><<<grid, kThreads, smem, dev.stream()>>>(p);
  RBEE_GPU_CHECK_LAUNCH();
}

// 64-row tiles where the last 128-row tile would be at most half full (Cout % 128 in 1..64: Cout 320, 192, 64).
int tile_rows(int cout) {
  const int rem = cout % 128;
  return rem > 0 && rem <= 64 ? 64 : 128;
}

template <MmaElem E, bool kPointwise>
void launch_implicit(GpuDevice& dev, const ImplicitParams& p) {
  if (tile_rows(p.cout) == 64) launch_implicit_bm<E, kPointwise, 64>(dev, p);
  else launch_implicit_bm<E, kPointwise, 128>(dev, p);
}

// RBEE_CONV_IMPLICIT: 0 off, 1 every supported shape, else (default) the chosen shapes.
int implicit_mode() {
  static const int mode = [] {
    const std::optional<bool> forced = env::flag("RBEE_CONV_IMPLICIT");
    return forced ? (*forced ? 1 : 0) : 2;
  }();
  return mode;
}

}  // namespace

bool conv2d_implicit(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                     const Conv2dParams& cp, bool silu, Tensor& out) {
  const int mode = implicit_mode();
  if (mode == 0) return false;
  const DType dt = x.dtype();
  if (dt != DType::F16 && dt != DType::BF16) return false;
  if (cp.groups != 1 || cp.dilation_h != 1 || cp.dilation_w != 1) return false;
  const int64_t n = x.dim(0), cin = x.dim(1), h = x.dim(2), wd = x.dim(3), cout = out.dim(1);
  const int64_t kh = w.dim(2), kw = w.dim(3), ho = out.dim(2), wo = out.dim(3);
  const int64_t K = cin * kh * kw, positions = ho * wo, np_total = n * positions;
  const int64_t lim = int64_t{1} << 31;
  if (cin % 8 != 0 || x.numel() >= lim || out.numel() >= lim || cout * K >= lim || K >= lim / 2) return false;
  const bool pointwise = kh == 1 && kw == 1 && cp.stride_h == 1 && cp.stride_w == 1 && cp.pad_h == 0 && cp.pad_w == 0;
  if (pointwise && (positions % 8 != 0 || reinterpret_cast<uintptr_t>(x.data()) % 16 != 0 ||
                    reinterpret_cast<uintptr_t>(w.data()) % 16 != 0))
    return false;
  if (mode == 2) {
    // Chosen shapes (per-shape H100 timings, docs/perf-notes/sd-speed.md, session 7): kernel taps with at most 128
    // output channels over at least 2^18 positions (the VAE decoder's 512x512 level: 0.83-0.95 of the time of
    // im2col + cuBLAS, whose columns are 9x the input there). Elsewhere cuBLAS's GEMMs (370-720 TF/s on SD's shapes)
    // beat this kernel (100-170 TF/s) by more than the columns cost.
    if (pointwise || cout > 128 || np_total < (int64_t{1} << 18)) return false;
  }

  ImplicitParams p{};
  p.bias = bias ? static_cast<const uint16_t*>(bias->data()) : nullptr;
  p.bias_img_stride = bias && bias->rank() == 2 ? (int)cout : 0;
  p.residual = residual ? static_cast<const uint16_t*>(residual->data()) : nullptr;
  p.out = static_cast<uint16_t*>(out.data());
  p.n = (int)n, p.cin = (int)cin, p.h = (int)h, p.w = (int)wd;
  p.cout = (int)cout, p.ho = (int)ho, p.wo = (int)wo, p.kw = (int)kw;
  p.taps = (int)(kh * kw), p.cc = cin % 32 == 0 ? 32 : 8;
  p.sh = cp.stride_h, p.sw = cp.stride_w, p.ph = cp.pad_h, p.pw = cp.pad_w;
  p.K = (int)K, p.positions = (int)positions, p.np_total = (int)np_total;
  p.silu = silu ? 1 : 0;
  Tensor x_nhwc, w_taps;
  if (pointwise) {
    p.x = static_cast<const uint16_t*>(x.data());
    p.wt = static_cast<const uint16_t*>(w.data());
  } else {
    x_nhwc = Tensor::empty({x.numel()}, dt, dev);
    w_taps = Tensor::empty({w.numel()}, dt, dev);
    const dim3 tgrid((unsigned)((h * wd + 31) / 32), (unsigned)((cin + 31) / 32), (unsigned)n);
    nchw_to_nhwc_kernel<<<tgrid, dim3(32, 8), 0, dev.stream()>>>(static_cast<const uint16_t*>(x.data()), (int)cin,
                                                                 (int)(h * wd), static_cast<uint16_t*>(x_nhwc.data()));
    RBEE_GPU_CHECK_LAUNCH();
    const dim3 wgrid((unsigned)std::min<int64_t>((K + 255) / 256, 64), (unsigned)std::min<int64_t>(cout, 65535));
    weight_taps_kernel<<<wgrid, 256, 0, dev.stream()>>>(static_cast<const uint16_t*>(w.data()), (int)cout, (int)cin,
                                                        (int)(kh * kw), p.cc, static_cast<uint16_t*>(w_taps.data()));
    RBEE_GPU_CHECK_LAUNCH();
    p.x = static_cast<const uint16_t*>(x_nhwc.data());
    p.wt = static_cast<const uint16_t*>(w_taps.data());
  }
  if (dt == DType::F16) {
    if (pointwise) launch_implicit<MmaElem::F16, true>(dev, p);
    else launch_implicit<MmaElem::F16, false>(dev, p);
  } else {
    if (pointwise) launch_implicit<MmaElem::BF16, true>(dev, p);
    else launch_implicit<MmaElem::BF16, false>(dev, p);
  }
  return true;
}

}  // namespace rbee::gpu
