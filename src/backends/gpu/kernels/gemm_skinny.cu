// The skinny 16-bit product (contract in gemm_skinny.h): out [M, N] = x [M, K] . w [N, K]^T (+ residual).
//
// Tiling. A block owns one output tile of BM rows of x (all of M: M <= BM) by kBN = 128 weight rows, and one
// split of K (blockIdx.y). Its 8 warps form a (BM / 32) x (8 / (BM / 32)) grid, each warp 32 rows of x by
// 128 / warps-along-N weight rows in 16 x 16 tiles of the platform's 16-bit tile product (mma<E>,
// backends/gpu/platform.h). K advances kBK = 64 elements a step through kStages shared-memory stages filled by
// asynchronous copies (copy_async_16), so kStages - 1 steps of weights are in flight while one is multiplied:
//   prologue: the weight tiles of the first kStages - 1 steps (weights are never written by an earlier kernel:
//             they are copied before grid_dependency_wait, while the previous kernel finishes), then the wait,
//             then those steps' x tiles; one commit group per step;
//   step s:   wait for step s's group, barrier, copies of step s + kStages - 1 into the stage step s - 1 used,
//             tile products of step s.
// Rows of x past M and weight rows past N are zero-filled and never stored; K is a multiple of 8, its last step
// zero-filled past K.
//
// Shared memory rows are kBK + 8 elements (144 bytes): the 8 row addresses of a fragment load fall in different
// 16-byte bank groups.
//
// Split-K: with S = gridDim.y > 1 every split writes its partial tile as each thread's accumulators in a row (a
// slot per split, tile and thread of `partial`), then one thread fences and counts the split on the tile's counter
// (GpuDevice::split_counters, zero between launches); the last split sets the counter back to zero, adds the slots
// in split order (its own read back like the others), adds the residual and writes out. Deterministic whichever
// split finishes last; no second kernel.
#include <algorithm>
#include <atomic>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/gemm_skinny.h"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/split_k.h"
#include "backends/gpu/peer_load.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

constexpr int kBN = 128;        // weight rows (output columns) per block
constexpr int kBK = 64;         // K elements per step
constexpr int kLd = kBK + 8;    // shared-memory row stride, elements
constexpr int kStages = 4;      // shared-memory stages
constexpr int kWarps = 8;
constexpr int kChunksPerRow = kBK / 8;  // 16-byte chunks of a row's step
constexpr int kMaxSplits = 16;

template <int BM>
struct SkinnyTile {
  static constexpr int kWarpsM = BM / 32;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kWarpN = kBN / kWarpsN;  // weight rows per warp
  static constexpr int kTm = 2;                 // 16-row tiles of x per warp
  static constexpr int kTn = kWarpN / 16;       // 16-row tiles of weights per warp
  static constexpr int kStageElems = (kBN + BM) * kLd;
  static constexpr int kSmemBytes = kStages * kStageElems * 2;
};

#if defined(__CUDACC__) || defined(__HIPCC__)

template <MmaElem E, int BM>
__global__ void __launch_bounds__(kWarps * RBEE_DEVICE_WARP_SIZE)
    skinny_gemm_kernel(SkinnyGemmArgs a, float* __restrict__ partial, int* __restrict__ counters,
                       int steps_per_split) {
  using Tile = SkinnyTile<BM>;
  constexpr int kThreads = kWarps * RBEE_DEVICE_WARP_SIZE;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // rows one pass of the block's copies covers
  constexpr int kWPasses = kBN / kRowsPerPass;
  constexpr int kXPasses = (BM + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kBN % kRowsPerPass == 0, "weight tile rows");
  extern __shared__ __align__(16) unsigned char skinny_smem_bytes[];
  uint16_t* const skinny_smem = reinterpret_cast<uint16_t*>(skinny_smem_bytes);
  __shared__ int skinny_last;
  const int tid = threadIdx.x, warp = tid / RBEE_DEVICE_WARP_SIZE;
  const int wm = warp / Tile::kWarpsN, wn = warp % Tile::kWarpsN;
  const int64_t n0 = (int64_t)blockIdx.x * kBN;
  const int steps = (int)((a.k + kBK - 1) / kBK);
  const int s0 = blockIdx.y * steps_per_split, s1 = min(steps, s0 + steps_per_split);

  // This thread's copies: 16-byte chunk `e` of rows row0 + p * kRowsPerPass (weights; x the same way), worked out
  // once; a step adds its K offset. Rows past N / M read row 0 (zero-filled, never stored).
  const int row0 = tid / kChunksPerRow, e = (tid % kChunksPerRow) * 8;
  const uint16_t* wsrc[kWPasses];
  bool win[kWPasses];
#pragma unroll
  for (int p = 0; p < kWPasses; ++p) {
    const int64_t row = n0 + row0 + p * kRowsPerPass;
    win[p] = row < a.n;
    wsrc[p] = a.w + (win[p] ? row : 0) * a.k + e;
  }
  const uint16_t* xsrc[kXPasses];
  bool xin[kXPasses];
#pragma unroll
  for (int p = 0; p < kXPasses; ++p) {
    const int row = row0 + p * kRowsPerPass;
    xin[p] = row < a.m && row < BM;
    xsrc[p] = a.x + (xin[p] ? row : 0) * a.k + e;
  }
  const int sdst = row0 * kLd + e;  // element offset of this thread's first chunk in a tile
  // Step s's tiles into stage `stage`: weights [kBN][kBK] then x [BM][kBK], rows kLd apart.
  const auto copy_w = [&](int s, int stage) {
    uint16_t* ws = skinny_smem + stage * Tile::kStageElems + sdst;
    const int64_t k0 = (int64_t)s * kBK;
    const bool kin = k0 + e < a.k;
#pragma unroll
    for (int p = 0; p < kWPasses; ++p) {
      const bool in = win[p] && kin;
      copy_async_16(ws + p * kRowsPerPass * kLd, in ? wsrc[p] + k0 : a.w, in);
    }
  };
  const auto copy_x = [&](int s, int stage) {
    uint16_t* xs = skinny_smem + stage * Tile::kStageElems + kBN * kLd + sdst;
    const int64_t k0 = (int64_t)s * kBK;
    const bool kin = k0 + e < a.k;
#pragma unroll
    for (int p = 0; p < kXPasses; ++p) {
      if (row0 + p * kRowsPerPass < BM) {
        const bool in = xin[p] && kin;
        copy_async_16(xs + p * kRowsPerPass * kLd, in ? xsrc[p] + k0 : a.x, in);
      }
    }
  };

  MmaAcc acc[Tile::kTm][Tile::kTn];
#pragma unroll
  for (int i = 0; i < Tile::kTm; ++i)
#pragma unroll
    for (int j = 0; j < Tile::kTn; ++j) mma_zero(acc[i][j]);

  for (int p = 0; p < kStages - 1; ++p) {
    if (s0 + p < s1) copy_w(s0 + p, p);
  }
  grid_dependency_wait();  // x (and the counters, the partials and out) come from earlier launches
  for (int p = 0; p < kStages - 1; ++p) {
    if (s0 + p < s1) copy_x(s0 + p, p);
    copy_async_commit();
  }
  for (int s = s0; s < s1; ++s) {
    copy_async_wait_pending<kStages - 2>();
    __syncthreads();  // step s landed for every thread; every warp is done with step s - 1's stage
    const int ahead = s + kStages - 1;
    if (ahead < s1) {
      copy_w(ahead, (ahead - s0) % kStages);
      copy_x(ahead, (ahead - s0) % kStages);
    }
    copy_async_commit();
    const uint16_t* ws = skinny_smem + ((s - s0) % kStages) * Tile::kStageElems;
    const uint16_t* xs = ws + kBN * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      MmaA fa[Tile::kTm];
      MmaB fb[Tile::kTn];
#pragma unroll
      for (int i = 0; i < Tile::kTm; ++i) mma_load_a(fa[i], xs + (wm * 32 + i * 16) * kLd + kk, kLd);
#pragma unroll
      for (int j = 0; j < Tile::kTn; ++j) mma_load_b_nk(fb[j], ws + (wn * Tile::kWarpN + j * 16) * kLd + kk, kLd);
#pragma unroll
      for (int i = 0; i < Tile::kTm; ++i)
#pragma unroll
        for (int j = 0; j < Tile::kTn; ++j) mma<E>(acc[i][j], fa[i], fb[j]);
    }
  }
  grid_dependency_trigger();  // the next kernel may start its blocks (they wait for this grid to finish)

  // f(acc element, its row of x, its column of out) for every accumulator element this lane holds.
  const auto for_each_element = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < Tile::kTm; ++i)
#pragma unroll
      for (int j = 0; j < Tile::kTn; ++j)
#pragma unroll
        for (int e = 0; e < kMmaAccPerLane; ++e)
          f(acc[i][j].v[e], wm * 32 + i * 16 + mma_acc_row(e), n0 + wn * Tile::kWarpN + j * 16 + mma_acc_col(e));
  };
  if (gridDim.y > 1) {
    // Publish this split's partial tile as this thread's accumulators, kPerThread floats in a row (16-byte stores
    // and loads; the layout of the slots only matters to this kernel), and count it; the last split goes on.
    constexpr int kPerThread = Tile::kTm * Tile::kTn * kMmaAccPerLane;
    static_assert(kPerThread % 4 == 0 && kThreads * kPerThread == BM * kBN, "partial slots");
    const auto slot = [&](unsigned z) {
      return reinterpret_cast<float4*>(partial + (((int64_t)z * gridDim.x + blockIdx.x) * kThreads + tid) * kPerThread);
    };
    float4* mine = slot(blockIdx.y);
    int q = 0;
    float4 quad;
    float* qv = &quad.x;
    for_each_element([&](float v, int, int64_t) {
      qv[q % 4] = v;
      if (++q % 4 == 0) mine[q / 4 - 1] = quad;
    });
    __syncthreads();  // every thread's slot is written
    if (tid == 0) {
      thread_fence();  // ... and, through this thread's cumulative fence, visible on the device before the count
      const bool last = atomic_add_i32(&counters[blockIdx.x], 1) == (int)gridDim.y - 1;
      if (last) {
        counters[blockIdx.x] = 0;  // every split has counted: ready for the next launch
        thread_fence();            // the other splits' slots before this block reads them
      }
      skinny_last = last;
    }
    __syncthreads();
    if (!skinny_last) return;
    // The sums in split order, split after split (a split's loads are independent and in flight together), each
    // slot read from L2 (load_peer_f4: written by other blocks of this launch, never from this SM's L1).
    for (unsigned z = 0; z < gridDim.y; ++z) {
      const float4* src = slot(z);
      q = 0;
      for_each_element([&](float& sum, int, int64_t) {
        if (q % 4 == 0) quad = load_peer_f4(src + q / 4);
        const float v = qv[q % 4];
        sum = z == 0 ? v : sum + v;
        ++q;
      });
    }
  }
  for_each_element([&](float v, int r, int64_t c) {
    if (r < a.m && c < a.n) a.out[r * a.n + c] = a.residual ? v + a.residual[r * a.n + c] : v;
  });
}

#endif  // device compilation

// Splits of K for `tiles` output tiles of `steps` K steps on `slots` resident blocks (split_k_choice): a block's
// prologue is kStages - 1 steps nothing overlaps, a split gets kStages - 1 steps at least (a shorter one never fills
// its pipeline), and the last split's sum reads S tiles of BM x kBN floats one split after the other (one L2 round
// trip each, ~tile_cost steps a split). RBEE_SKINNY_SPLITS=S (>= 1) forces S.
int skinny_splits(int64_t tiles, int steps, int64_t slots, int tile_cost) {
  const int forced = (int)env::integer_or("RBEE_SKINNY_SPLITS", 0, 0, kMaxSplits);
  if (forced > 0) return std::min(forced, steps);
  return (int)split_k_choice(tiles, steps, slots, kMaxSplits, SplitKCost{kStages - 1, tile_cost, kStages - 1});
}

template <MmaElem E, int BM>
void launch_tile(GpuDevice& device, const SkinnyGemmArgs& a) {
  using Tile = SkinnyTile<BM>;
  const auto kernel = &skinny_gemm_kernel<E, BM>;
  static std::atomic<uint64_t> opted{0};
  if (opt_in_dynamic_smem(device, reinterpret_cast<const void*>(kernel), Tile::kSmemBytes, opted)) {
    RBEE_GPU_CHECK(func_prefer_max_shared(reinterpret_cast<const void*>(kernel)));
  }
  const int64_t tiles = (a.n + kBN - 1) / kBN;
  const int steps = (int)((a.k + kBK - 1) / kBK);
  // Resident blocks: as many as the shared memory lets a multiprocessor hold (228 KB on sm_90: 2 of either tile).
  const int64_t per_sm = std::max<int64_t>(1, (int64_t)device.props().shared_mem_per_block_optin / Tile::kSmemBytes);
  const int64_t slots = per_sm * device.props().multiprocessors;
  int splits = tiles <= kSplitCounters ? skinny_splits(tiles, steps, slots, BM / 32) : 1;
  const int per = (steps + splits - 1) / splits;
  splits = (steps + per - 1) / per;  // every split has steps
  Tensor partial;
  float* pp = nullptr;
  int* counters = nullptr;
  if (splits > 1) {
    partial = Tensor::empty({(int64_t)splits * tiles * BM * kBN}, DType::F32, device);
    pp = static_cast<float*>(partial.data());
    counters = device.split_counters();
  }
  const dim3 grid((unsigned)tiles, (unsigned)splits);
  const dim3 block(kWarps * device.props().warp_size);
  quant::launch_decode_kernel(kernel, grid, block, (size_t)Tile::kSmemBytes, device.stream(), a, pp, counters, per);
}

}  // namespace

bool skinny_gemm_takes(const GpuDevice& device, DType type, int64_t m, int64_t n, int64_t k) {
  if (type != DType::F16 && type != DType::BF16) return false;
  if (m < kSkinnyMinRows || m > kSkinnyMaxRows || k % 8 != 0 || n < 1 || k < 1) return false;
  if (device.props().warp_size != 32 && device.props().warp_size != 64) return false;
  return env::flag("RBEE_SKINNY_GEMM").value_or(device.blas() == nullptr);  // read at each call (tests set it)
}

void launch_skinny_gemm(GpuDevice& device, const SkinnyGemmArgs& a) {
  RBEE_ASSERT(a.m >= 1 && a.m <= kSkinnyMaxRows && a.k % 8 == 0, "skinny gemm: {} rows, K {}", a.m, a.k);
  if (a.type == DType::BF16) {
    if (a.m <= 32) launch_tile<MmaElem::BF16, 32>(device, a);
    else launch_tile<MmaElem::BF16, 64>(device, a);
  } else {
    RBEE_ASSERT(a.type == DType::F16, "skinny gemm: {} is not a 16-bit float type", dtype_name(a.type));
    if (a.m <= 32) launch_tile<MmaElem::F16, 32>(device, a);
    else launch_tile<MmaElem::F16, 64>(device, a);
  }
}

}  // namespace rbee::gpu
