// Dense flash attention on 16-bit matrix tiles (contract: attention_flash.h). A thread block owns kRows (128, or 64
// at 160 columns) consecutive queries of one (batch, head): 4 warps of 16 MT rows each (DenseCfg below, Dp the
// head size padded to a tile width). Q rows, then K and V tiles of BN keys, go to shared memory through copy_async_16 (head
// columns past D, queries past Tq and keys past Tk read as zeros; keys past Tk are also masked), and
// flash_key_tiles (flash_tiles.cuh, the paged kernel's loop) runs every key tile; each output row is O / sum,
// rounded to the operand type. No split of the key range: SD's shapes have Tq / kRows x B x H >= 64 blocks.
#include "backends/gpu/kernels/attention_flash.h"

#include <cstdlib>
#include <string_view>

#include "backends/gpu/kernels/flash_tiles.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

struct DenseFlashParams {
  const uint16_t* q;  // [B, Hq, Tq, d], element strides q_s0..q_s2, unit last stride
  const uint16_t* k;  // [B, Hkv, Tk, d]
  const uint16_t* v;  // [B, Hkv, Tk, d]
  int64_t q_s0, q_s1, q_s2, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2;
  uint16_t* out;  // [B, Hq, Tq, d], element strides o_s0..o_s2, unit last stride
  int64_t o_s0, o_s1, o_s2;
  int tq, tk, d;  // d <= the configuration's D, a multiple of 8
  int group;      // Hq / Hkv
  float qk_mul;   // scale * log2(e)
};

template <class Cfg, MmaElem E>
__global__ void __launch_bounds__(Cfg::kWarps* RBEE_DEVICE_WARP_SIZE) dense_flash_kernel(DenseFlashParams p) {
  static_assert(Cfg::WK == 1, "dense attention splits rows over warps only");
  constexpr int W = RBEE_DEVICE_WARP_SIZE, kThreads = Cfg::kWarps * W;
  constexpr int D = Cfg::D, BN = Cfg::BN, MT = Cfg::MT, DT = Cfg::kDT, kLd = Cfg::kLd;
  constexpr int R = kMmaRowsPerLane, A = kMmaAccPerLane;
  extern __shared__ float4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw);
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(smem);
  uint16_t* kv = reinterpret_cast<uint16_t*>(smem + Cfg::kKvOff);  // K stage 0, K stage 1, V stage 0, V stage 1
  const int tid = threadIdx.x, warp = tid / W;
  const int t0 = (int)blockIdx.x * Cfg::kRows, h = (int)blockIdx.y, b = (int)blockIdx.z, hk = h / p.group;
  const int nrows = min(Cfg::kRows, p.tq - t0);
  const uint16_t* qb = p.q + b * p.q_s0 + h * p.q_s1 + (int64_t)t0 * p.q_s2;
  const uint16_t* kb = p.k + b * p.k_s0 + hk * p.k_s1;
  const uint16_t* vb = p.v + b * p.v_s0 + hk * p.v_s1;

  // Q rows (committed with the first key tile's copies).
  for (int e = tid; e < Cfg::kRows * (D / 8); e += kThreads) {
    const int r = e / (D / 8), c = e % (D / 8) * 8;
    const bool in = r < nrows && c < p.d;
    copy_async_16(q_tile + r * kLd + c, in ? qb + r * p.q_s2 + c : qb, in);
  }
  // K and V rows of keys k0 .. k0 + BN - 1 into stage sg.
  auto stage = [&](int k0, int sg) {
    uint16_t* kd = kv + sg * BN * kLd;
    uint16_t* vd = kv + (2 + sg) * BN * kLd;
    for (int e = tid; e < BN * (D / 8); e += kThreads) {
      const int j = e / (D / 8), c = e % (D / 8) * 8, pos = k0 + j;
      const bool in = pos < p.tk && c < p.d;
      copy_async_16(kd + j * kLd + c, in ? kb + pos * p.k_s2 + c : kb, in);
      copy_async_16(vd + j * kLd + c, in ? vb + pos * p.v_s2 + c : vb, in);
    }
    copy_async_commit();
  };

  FlashRowState<Cfg> fs;
  fs.init();
  const int row0 = warp * 16 * MT;
  int row_lo[MT][R], row_hi[MT][R];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
      row_lo[mt][s] = 0;
      row_hi[mt][s] = row0 + 16 * mt + mma_slot_row(s) < nrows ? p.tk : 0;
    }
  }
  flash_key_tiles<Cfg, E>(smem, (p.tk + BN - 1) / BN, 0, row_lo, row_hi, p.qk_mul, false, 0.f, stage, fs);

  uint16_t* ob = p.out + b * p.o_s0 + h * p.o_s1 + (int64_t)t0 * p.o_s2;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < A; ++i) {
      const int r = row0 + 16 * mt + mma_acc_row(i);
      if (r >= nrows) continue;
      const float sum = fs.l[mt][mma_acc_slot(i)];
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const int c = 16 * dt + mma_acc_col(i);
        if (c < p.d) ob[(int64_t)r * p.o_s2 + c] = round_to_elem<E>(fs.o[mt][dt].v[i] * inv);
      }
    }
  }
}

// Tile configurations by padded head size: 4 warps of 32 rows (16 at 160 columns: the O accumulators of 32 rows
// would not fit the registers), 64-key tiles up to 80 columns, 32-key tiles above. Shared memory with P tiles
// (FAST false, or a platform without kMmaAccToARegisters): 60 KiB at 48 columns, 84 KiB at 80, 78 KiB at 128, 68
// KiB at 160; FAST on CUDA keeps P in registers: 42, 66, 68 and 63 KiB.
template <int Dp, bool FAST>
using DenseCfg = FlashCfg<Dp, 4, 1, (Dp <= 128 ? 2 : 1), (Dp <= 80 ? 64 : 32), FAST>;

int padded_head(int d) {
  for (const int dp : {48, 64, 80, 128, 160}) {
    if (d <= dp) return dp;
  }
  return 0;
}

template <bool FAST, class F>
bool visit_dense_cfg(int dp, F&& f) {
  switch (dp) {
    case 48: f(DenseCfg<48, FAST>{}); return true;
    case 64: f(DenseCfg<64, FAST>{}); return true;
    case 80: f(DenseCfg<80, FAST>{}); return true;
    case 128: f(DenseCfg<128, FAST>{}); return true;
    case 160: f(DenseCfg<160, FAST>{}); return true;
    default: return false;
  }
}

// RBEE_ATTN_FAST_TILES=0: the key-tile loop with P through shared memory and Q reloaded per tile (A/B).
bool dense_fast_tiles() {
  static const bool on = env::flag_or("RBEE_ATTN_FAST_TILES", true);
  return on;
}

}  // namespace

bool attention_flash(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                     Tensor& out) {
  const DType dtype = q.dtype();
  if (dtype != DType::F16 && dtype != DType::BF16) return false;
  if (params.causal || params.window > 0 || params.softcap > 0) return false;
  if (!env::flag_or("RBEE_ATTN_FLASH", true)) return false;
  const int64_t B = q.dim(0), Hq = q.dim(1), Tq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Tk = k.dim(2);
  if (v.dim(3) != D || D % 8 != 0 || Tq < 16 || Tk < 1 || Hkv == 0 || Hq % Hkv != 0) return false;
  const int dp = padded_head((int)D);
  if (dp == 0) return false;
  if (out.stride(3) != 1 || q.stride(3) != 1 || k.stride(3) != 1 || v.stride(3) != 1) return false;
  for (const Tensor* t : {&q, &k, &v}) {
    if (reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
    for (int a = 0; a < 3; ++a) {
      if (t->stride(a) % 8 != 0 || t->stride(a) < 0) return false;
    }
  }
  const int64_t int_max = 0x7fffffff;
  if (Tq > int_max || Tk > int_max || Hq > 65535 || B > 65535) return false;

  DenseFlashParams p{};
  p.q = static_cast<const uint16_t*>(q.data());
  p.k = static_cast<const uint16_t*>(k.data());
  p.v = static_cast<const uint16_t*>(v.data());
  p.q_s0 = q.stride(0), p.q_s1 = q.stride(1), p.q_s2 = q.stride(2);
  p.k_s0 = k.stride(0), p.k_s1 = k.stride(1), p.k_s2 = k.stride(2);
  p.v_s0 = v.stride(0), p.v_s1 = v.stride(1), p.v_s2 = v.stride(2);
  p.out = static_cast<uint16_t*>(out.data());
  p.o_s0 = out.stride(0), p.o_s1 = out.stride(1), p.o_s2 = out.stride(2);
  p.tq = (int)Tq, p.tk = (int)Tk, p.d = (int)D;
  p.group = (int)(Hq / Hkv);
  p.qk_mul = params.scale * kLog2e;

  const size_t smem_limit = std::max(dev.props().shared_mem_per_block_optin, dev.props().shared_mem_per_block);
  bool launched = false;
  auto launch = [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    if ((size_t)Cfg::kSmemBytes > smem_limit) return;
    const dim3 grid((unsigned)((Tq + Cfg::kRows - 1) / Cfg::kRows), (unsigned)Hq, (unsigned)B);
    const unsigned threads = (unsigned)(Cfg::kWarps * dev.props().warp_size);
    if (dtype == DType::F16) {
      launch_flash_kernel<dense_flash_kernel<Cfg, MmaElem::F16>>(dev, grid, threads, Cfg::kSmemBytes, p);
    } else {
      launch_flash_kernel<dense_flash_kernel<Cfg, MmaElem::BF16>>(dev, grid, threads, Cfg::kSmemBytes, p);
    }
    launched = true;
  };
  if (dense_fast_tiles()) visit_dense_cfg<true>(dp, launch);
  else visit_dense_cfg<false>(dp, launch);
  return launched;
}

}  // namespace rbee::gpu
