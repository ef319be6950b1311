// Implicit-GEMM convolutions on 16-bit matrix tiles (the mma_* contract of backends/gpu/platform.h): the fast path
// of conv2d_fused (op_table.def Conv2dFused) for F16 / BF16, NCHW, groups 1, no dilation, KS x KS kernels (KS 1 or 3).
//
// The product, per call: out[co][np] = sum_k w[co][k] . col[k][np] with k = (ci, ky, kx) in w's own order
// (K = Cin * KS * KS) and np = image * Ho * Wo + position, so both CFG halves (or any batch) form one GEMM.
// col is never written to memory: a block gathers its [kBK x kBN] slice of it from x straight into shared memory
// (zero in the padding and past the edges), beside the [kBM x kBK] slice of w (16-byte loads; K % 8 == 0).
// Block tile kBM x kBN = 128 x 128 (8 warps, each 32 x 64 = 2 x 4 tiles of 16 x 16), K in steps of kBK = 32,
// shared memory double-buffered: step s + 1 is loaded into registers while step s is multiplied, stored into the
// other buffer after, one barrier per step.
// Epilogue, per accumulator element (its row and column from mma_acc_row / mma_acc_col, so no vendor layout is
// assumed): + bias[image?][co] + residual[image][co][position], silu, rounded once to the storage type.
// Split-K: when the output tiles alone would leave most of the GPU idle (small feature maps), grid.z splits K; each
// split writes f32 partial sums [splits][Cout][N * Ho * Wo] and conv_igemm_reduce_kernel sums them in split order
// and applies the epilogue. Grid and scratch depend only on shapes, so the launch is graph-capturable.
#include <algorithm>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/conv_igemm.h"

#include <cstdlib>
#include <string_view>
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kWarps = 8, kWM = 4, kWN = 2;           // warps along rows (couts) x columns (positions)
constexpr int kMT = kBM / kWM / 16, kNT = kBN / kWN / 16;  // 16 x 16 tiles per warp: 2 x 4
constexpr int kThreads = kWarps * RBEE_DEVICE_WARP_SIZE;
constexpr int kLdA = kBK + 8, kLdB = kBN + 8;         // shared row strides (16-bit elements; multiples of 8)
constexpr int kAVecs = kBM * kBK / 8 / kThreads;       // 16-byte A loads per thread per step
constexpr int kBPer = kBK * kBN / kThreads;            // gathered B elements per thread per step
constexpr int kBRowStep = kThreads / kBN;              // B rows between one thread's elements
static_assert(kAVecs >= 1 && kBM * kBK / 8 % kThreads == 0, "A tile split");
static_assert(kThreads % kBN == 0 && kBPer * kBRowStep == kBK, "B tile split");

struct IgemmParams {
  const uint16_t* x;         // [n, cin, h, w]
  const uint16_t* wt;        // [cout, K]
  const uint16_t* bias;      // [cout] or [n, cout] (bias_img_stride cout) or null
  const uint16_t* residual;  // [n, cout, positions] or null
  uint16_t* out;             // [n, cout, positions]
  float* partial;            // split-K: [splits, cout, np_total]
  int n, cin, h, w, cout, ho, wo, sh, sw, ph, pw;
  int K, positions, np_total, bias_img_stride;
  int steps_per_split;       // K steps of kBK per grid.z slice
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

// The epilogue of output element (co, np) on its f32 sum.
template <MmaElem E>
__device__ __forceinline__ void igemm_store(const IgemmParams& p, int co, int np, float v) {
  const int img = np / p.positions, q = np - img * p.positions;
  const int64_t o = ((int64_t)img * p.cout + co) * p.positions + q;
  if (p.bias) v += elem_to_float<E>(p.bias[(int64_t)img * p.bias_img_stride + co]);
  if (p.residual) v += elem_to_float<E>(p.residual[o]);
  if (p.silu) v = v / (1.f + expf(-v));
  p.out[o] = float_to_elem<E>(v);
}

template <MmaElem E, int KS>
__global__ void __launch_bounds__(kThreads) conv_igemm_kernel(IgemmParams p) {
  // Shared tiles as 16-byte words (aligned for ldmatrix and vector stores), used as 16-bit elements.
  __shared__ Bytes16 as_raw[2 * kBM * kLdA / 8];
  __shared__ Bytes16 bs_raw[2 * kBK * kLdB / 8];
  uint16_t(*as)[kBM * kLdA] = reinterpret_cast<uint16_t(*)[kBM * kLdA]>(as_raw);
  uint16_t(*bs)[kBK * kLdB] = reinterpret_cast<uint16_t(*)[kBK * kLdB]>(bs_raw);
  constexpr int kTaps = KS * KS;
  const int tid = (int)threadIdx.x, warp = tid / RBEE_DEVICE_WARP_SIZE;
  const int wm = warp / kWN, wn = warp % kWN;
  const int m0 = (int)blockIdx.y * kBM, n0 = (int)blockIdx.x * kBN;
  const int steps_total = (p.K + kBK - 1) / kBK;
  const int s_begin = (int)blockIdx.z * p.steps_per_split;
  const int s_end = min(steps_total, s_begin + p.steps_per_split);

  // This thread's B column (one output position) and first B row; fixed for the whole K loop.
  const int bj = tid % kBN, br0 = tid / kBN;
  const int bnp = n0 + bj;
  const bool bvalid = bnp < p.np_total;
  const int bimg = bvalid ? bnp / p.positions : 0, bq = bvalid ? bnp - bimg * p.positions : 0;
  const int boy = bq / p.wo, box = bq - boy * p.wo;
  const int iy0 = boy * p.sh - p.ph, ix0 = box * p.sw - p.pw;
  const uint16_t* xb = p.x + (int64_t)bimg * p.cin * p.h * p.w;

  Bytes16 a_regs[kAVecs];
  uint16_t b_regs[kBPer];
  auto load_step = [&](int step) {
    const int k0 = step * kBK;
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) {
      const int v = tid + i * kThreads, row = v / (kBK / 8), kc = (v % (kBK / 8)) * 8;
      const int co = m0 + row, k = k0 + kc;
      if (co < p.cout && k < p.K) a_regs[i] = *reinterpret_cast<const Bytes16*>(p.wt + (int64_t)co * p.K + k);
      else a_regs[i] = Bytes16{{0u, 0u, 0u, 0u}};
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const int k = k0 + br0 + i * kBRowStep;
      uint16_t v = 0;
      if (bvalid && k < p.K) {
        const int ci = k / kTaps, t = k - ci * kTaps, ky = t / KS, kx = t - ky * KS;
        const int iy = iy0 + ky, ix = ix0 + kx;
        if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) v = xb[((int64_t)ci * p.h + iy) * p.w + ix];
      }
      b_regs[i] = v;
    }
  };
  auto store_step = [&](int buf) {
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) {
      const int v = tid + i * kThreads, row = v / (kBK / 8), kc = (v % (kBK / 8)) * 8;
      *reinterpret_cast<Bytes16*>(&as[buf][row * kLdA + kc]) = a_regs[i];
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) bs[buf][(br0 + i * kBRowStep) * kLdB + bj] = b_regs[i];
  };

  MmaAcc acc[kMT][kNT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mma_zero(acc[mt][nt]);

  if (s_begin < s_end) {
    load_step(s_begin);
    store_step(0);
  }
  __syncthreads();
  for (int s = s_begin; s < s_end; ++s) {
    const int buf = (s - s_begin) & 1;
    if (s + 1 < s_end) load_step(s + 1);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      MmaA a[kMT];
      MmaB b[kNT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_load_a(a[mt], &as[buf][(wm * kMT * 16 + mt * 16) * kLdA + kk], kLdA);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_load_b_kn(b[nt], &bs[buf][kk * kLdB + wn * kNT * 16 + nt * 16], kLdB);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mma<E>(acc[mt][nt], a[mt], b[nt]);
    }
    if (s + 1 < s_end) store_step(buf ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < kMmaAccPerLane; ++i) {
        const int co = m0 + wm * kMT * 16 + mt * 16 + mma_acc_row(i);
        const int np = n0 + wn * kNT * 16 + nt * 16 + mma_acc_col(i);
        if (co >= p.cout || np >= p.np_total) continue;
        if (p.partial) p.partial[((int64_t)blockIdx.z * p.cout + co) * p.np_total + np] = acc[mt][nt].v[i];
        else igemm_store<E>(p, co, np, acc[mt][nt].v[i]);
      }
}

// Split-K: out = epilogue(sum over splits of partial), one thread per output element (co, np).
template <MmaElem E>
__global__ void conv_igemm_reduce_kernel(IgemmParams p, int splits) {
  const int64_t total = (int64_t)p.cout * p.np_total;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    float v = 0.f;
    for (int z = 0; z < splits; ++z) v += p.partial[z * total + e];
    igemm_store<E>(p, (int)(e / p.np_total), (int)(e % p.np_total), v);
  }
}

template <MmaElem E>
void launch_igemm(GpuDevice& dev, IgemmParams p, int ks) {
  const int steps = (p.K + kBK - 1) / kBK;
  const int tiles_n = (p.np_total + kBN - 1) / kBN, tiles_m = (p.cout + kBM - 1) / kBM;
  // Split K only when the output tiles leave SMs idle (fewer tiles than SMs), into as many slices as still fit one
  // wave of about two blocks per SM (more would add a partial wave), keeping at least 8 steps per slice.
  const int sms = std::max(1, dev.info().compute_units), tiles = tiles_n * tiles_m;
  int splits = 1;
  if (tiles < sms) splits = std::clamp(2 * sms / tiles, 1, std::max(1, steps / 8));
  p.steps_per_split = (steps + splits - 1) / splits;
  splits = (steps + p.steps_per_split - 1) / p.steps_per_split;
  Tensor partial;
  if (splits > 1) {
    partial = Tensor::empty({(int64_t)splits * p.cout * p.np_total}, DType::F32, dev);
    p.partial = static_cast<float*>(partial.data());
  }
  const dim3 grid((unsigned)tiles_n, (unsigned)tiles_m, (unsigned)splits);
  if (ks == 3) conv_igemm_kernel<E, 3><<<grid, kThreads, 0, dev.stream()>>>(p);
  else conv_igemm_kernel<E, 1><<<grid, kThreads, 0, dev.stream()>>>(p);
  RBEE_GPU_CHECK_LAUNCH();
  if (splits > 1) {
    conv_igemm_reduce_kernel<E><<<grid_for((int64_t)p.cout * p.np_total, 256), 256, 0, dev.stream()>>>(p, splits);
    RBEE_GPU_CHECK_LAUNCH();
  }
}

}  // namespace

bool conv2d_igemm(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                  const Conv2dParams& cp, bool silu, Tensor& out) {
  // RBEE_CONV_IGEMM=0 sends every fused convolution through im2col + GEMM + epilogue (A/B comparisons, bisecting);
  // =1 tries this path before the vendor Blas's (conv.cu).
  static const bool enabled = env::flag_or("RBEE_CONV_IGEMM", true);
  if (!enabled) return false;
  const DType dt = x.dtype();
  if (dt != DType::F16 && dt != DType::BF16) return false;
  const int64_t kh = w.dim(2), kw = w.dim(3);
  if (cp.groups != 1 || cp.dilation_h != 1 || cp.dilation_w != 1 || kh != kw || (kh != 1 && kh != 3)) return false;
  const int64_t K = x.dim(1) * kh * kw, positions = out.dim(2) * out.dim(3), np_total = x.dim(0) * positions;
  const int64_t lim = int64_t{1} << 30;
  if (K % 8 != 0 || np_total >= lim || out.dim(1) >= lim || K >= lim || x.numel() >= lim * 2) return false;
  // 16-byte weight rows: every tensor's data is 16-byte aligned as allocated; a view offset may not be.
  if (reinterpret_cast<uintptr_t>(w.data()) % 16 != 0) return false;

  IgemmParams p{};
  p.x = static_cast<const uint16_t*>(x.data());
  p.wt = static_cast<const uint16_t*>(w.data());
  p.bias = bias ? static_cast<const uint16_t*>(bias->data()) : nullptr;
  p.bias_img_stride = bias && bias->rank() == 2 ? (int)out.dim(1) : 0;
  p.residual = residual ? static_cast<const uint16_t*>(residual->data()) : nullptr;
  p.out = static_cast<uint16_t*>(out.data());
  p.partial = nullptr;
  p.n = (int)x.dim(0), p.cin = (int)x.dim(1), p.h = (int)x.dim(2), p.w = (int)x.dim(3);
  p.cout = (int)out.dim(1), p.ho = (int)out.dim(2), p.wo = (int)out.dim(3);
  p.sh = cp.stride_h, p.sw = cp.stride_w, p.ph = cp.pad_h, p.pw = cp.pad_w;
  p.K = (int)K, p.positions = (int)positions, p.np_total = (int)np_total;
  p.silu = silu ? 1 : 0;
  if (dt == DType::F16) launch_igemm<MmaElem::F16>(dev, p, (int)kh);
  else launch_igemm<MmaElem::BF16>(dev, p, (int)kh);
  return true;
}

}  // namespace rbee::gpu
