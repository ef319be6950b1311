// Batched GEMM (gemm.h): the mapping onto the vendor Blas, and rbee's own tiled shared-memory kernel.
//
// rbee's kernel: a 256-thread block computes a BM x BN tile of C, walking K in steps of BK. Each step's A and B
// tiles are loaded from global memory (through the operands' strides, with the thread-to-element mapping
// chosen so that consecutive threads read consecutive addresses along whichever axis is contiguous), converted
// to the accumulation type and stored k-major in shared memory (double-buffered: the next tile's loads are in
// flight while the current one is multiplied). Threads form a 16 x 16 grid; thread (ty, tx) owns rows
// ty + 16 i and columns tx + 16 j of the tile, so its shared-memory reads are broadcasts (A) or consecutive (B).
#include "backends/gpu/kernels/gemm.h"

#include <climits>
#include <vector>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"

namespace rbee::gpu {

namespace {

constexpr int kGemmThreads = 256;
constexpr int kGrid = 16;  // threads per tile side
constexpr int kPad = 4;    // shared-memory row padding (breaks bank conflicts of the k-contiguous loads)

struct GemmParams {
  int64_t m, n, k;
  const void* a;
  int64_t a_rs, a_cs;
  const void* b;
  int64_t b_rs, b_cs;
  void* c;
  int64_t c_rs;
  int batch_rank;
  int64_t batch, batch_shape[kMaxRank];
  int64_t a_bs[kMaxRank], b_bs[kMaxRank], c_bs[kMaxRank];
};

template <class T, class Acc>
__device__ inline Acc load_acc(const T* p) {
  return (Acc)load(p);
}

template <class T, class Acc, int BM, int BN, int BK>
__global__ void __launch_bounds__(kGemmThreads) gemm_kernel(GemmParams p) {
  constexpr int TM = BM / kGrid, TN = BN / kGrid;
  constexpr int LA = BM * BK / kGemmThreads, LB = BK * BN / kGemmThreads;  // elements each thread loads
  __shared__ Acc as[2][BK][BM + kPad];
  __shared__ Acc bs[2][BK][BN + kPad];
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
  const bool a_k_contiguous = p.a_cs == 1, b_n_contiguous = p.b_cs == 1;
  const int64_t k_tiles = (p.k + BK - 1) / BK;

  for (int64_t batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    int64_t a_off = 0, b_off = 0, c_off = 0, rem = batch;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t i = rem % p.batch_shape[d];
      rem /= p.batch_shape[d];
      a_off += i * p.a_bs[d];
      b_off += i * p.b_bs[d];
      c_off += i * p.c_bs[d];
    }
    const T* a = static_cast<const T*>(p.a) + a_off;
    const T* b = static_cast<const T*>(p.b) + b_off;
    T* c = static_cast<T*>(p.c) + c_off;

    // Each thread's loads cover the same (row, k) / (k, column) offsets in every K tile: their addresses are
    // set up once and advance by one tile's stride per step.
    const T* a_src[LA];
    const T* b_src[LB];
    int a_q[LA], b_q[LB];
    bool a_ok[LA], b_ok[LB];
#pragma unroll
    for (int r = 0; r < LA; ++r) {
      const int e = tid + r * kGemmThreads;
      const int i = a_k_contiguous ? e / BK : e % BM, q = a_k_contiguous ? e % BK : e / BM;
      a_ok[r] = m0 + i < p.m;
      a_q[r] = q;
      a_src[r] = a + (a_ok[r] ? (m0 + i) * p.a_rs : 0) + q * p.a_cs;
    }
#pragma unroll
    for (int r = 0; r < LB; ++r) {
      const int e = tid + r * kGemmThreads;
      const int q = b_n_contiguous ? e / BN : e % BK, j = b_n_contiguous ? e % BN : e / BK;
      b_ok[r] = n0 + j < p.n;
      b_q[r] = q;
      b_src[r] = b + q * p.b_rs + (b_ok[r] ? (n0 + j) * p.b_cs : 0);
    }
    const int64_t a_step = BK * p.a_cs, b_step = BK * p.b_rs;

    Acc ra[LA], rb[LB];
    // Global -> registers for K tile kt.
    auto load_tiles = [&](int64_t kt) {
      const int64_t k0 = kt * BK, a_off = kt * a_step, b_off = kt * b_step;
#pragma unroll
      for (int r = 0; r < LA; ++r) {
        ra[r] = (a_ok[r] && k0 + a_q[r] < p.k) ? load_acc<T, Acc>(a_src[r] + a_off) : Acc(0);
      }
#pragma unroll
      for (int r = 0; r < LB; ++r) {
        rb[r] = (b_ok[r] && k0 + b_q[r] < p.k) ? load_acc<T, Acc>(b_src[r] + b_off) : Acc(0);
      }
    };
    // Registers -> shared buffer `buf`.
    auto store_tiles = [&](int buf) {
#pragma unroll
      for (int r = 0; r < LA; ++r) {
        const int e = tid + r * kGemmThreads;
        const int i = a_k_contiguous ? e / BK : e % BM, q = a_k_contiguous ? e % BK : e / BM;
        as[buf][q][i] = ra[r];
      }
#pragma unroll
      for (int r = 0; r < LB; ++r) {
        const int e = tid + r * kGemmThreads;
        const int q = b_n_contiguous ? e / BN : e % BK, j = b_n_contiguous ? e % BN : e / BK;
        bs[buf][q][j] = rb[r];
      }
    };

    Acc acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);

    if (k_tiles > 0) {
      load_tiles(0);
      store_tiles(0);
      __syncthreads();
    }
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      const int buf = (int)(kt & 1);
      const bool more = kt + 1 < k_tiles;
      if (more) load_tiles(kt + 1);  // in flight during the products below
#pragma unroll
      for (int q = 0; q < BK; ++q) {
        Acc av[TM], bv[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = as[buf][q][ty + kGrid * i];
#pragma unroll
        for (int j = 0; j < TN; ++j) bv[j] = bs[buf][q][tx + kGrid * j];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
      }
      // The other buffer was last read in step kt - 1, which every thread finished before the barrier below
      // of that step.
      if (more) store_tiles(buf ^ 1);
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t gi = m0 + ty + kGrid * i;
      if (gi >= p.m) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int64_t gj = n0 + tx + kGrid * j;
        if (gj < p.n) store(c + gi * p.c_rs + gj, (compute_t<T>)acc[i][j]);
      }
    }
  }
}

template <class T, class Acc, int BM, int BN, int BK>
void launch_gemm(GpuDevice& dev, const GemmParams& p) {
  const int64_t tiles_n = ceil_div(p.n, BN), tiles_m = ceil_div(p.m, BM);
  RBEE_CHECK_CODE(tiles_m <= 65535 && tiles_n <= INT_MAX, ErrorCode::Unsupported,
                  "gemm: {} x {} output is too large for one launch", p.m, p.n);
  const dim3 grid((unsigned)tiles_n, (unsigned)tiles_m, (unsigned)std::min<int64_t>(p.batch, 65535));
  gemm_kernel<T, Acc, BM, BN, BK><<<grid, kGemmThreads, 0, dev.stream()>>>(p);
  RBEE_GPU_CHECK_LAUNCH();
}

template <class T, class Acc>
void run_rbee_gemm(GpuDevice& dev, const GemmParams& p) {
  // Large tiles once both sides fill them; small tiles keep more blocks busy on thin or small products (and
  // keep f64's 8 x 8 accumulators from spilling).
  if (p.m >= 128 && p.n >= 128 && !std::is_same_v<Acc, double>) launch_gemm<T, Acc, 128, 128, 8>(dev, p);
  else launch_gemm<T, Acc, 64, 64, 16>(dev, p);
}

// Batch dims of size > 1, innermost last: (extent, stride of a, b, c).
struct BatchDim {
  int64_t extent, a, b, c;
};

}  // namespace

bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool* trans, int64_t* ld) {
  const int64_t min_rows = std::max<int64_t>(rows, 1), min_cols = std::max<int64_t>(cols, 1);
  // Row-major: unit column stride, rows at least `cols` apart. A size-1 axis has no stride to honour.
  const int64_t row_rs = rows == 1 ? min_cols : rs, row_cs = cols == 1 ? 1 : cs;
  if (row_cs == 1 && row_rs >= min_cols) {
    *trans = false;
    *ld = row_rs;
    return true;
  }
  // Stored transposed ([cols, rows] row-major): unit row stride, columns at least `rows` apart.
  const int64_t col_rs = rows == 1 ? 1 : rs, col_cs = cols == 1 ? min_rows : cs;
  if (col_rs == 1 && col_cs >= min_rows) {
    *trans = true;
    *ld = col_cs;
    return true;
  }
  return false;
}

bool gemm_blas(GpuDevice& dev, const GemmSpec& s) {
  Blas* blas = dev.blas();
  if (!blas || s.dtype == DType::F64 || s.k == 0) return false;
  if (s.m == 0 || s.n == 0) return true;
  bool ta = false, tb = false, tc = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  if (!blas_layout(s.m, s.k, s.a.rs, s.a.cs, &ta, &lda) || !blas_layout(s.k, s.n, s.b.rs, s.b.cs, &tb, &ldb) ||
      !blas_layout(s.m, s.n, s.c.rs, s.c.cs, &tc, &ldc) || tc) {
    return false;
  }
  constexpr int64_t kIntMax = INT_MAX;
  if (s.m > kIntMax || s.n > kIntMax || s.k > kIntMax || lda > kIntMax || ldb > kIntMax || ldc > kIntMax) return false;

  // Batch dims: drop size-1 dims, then merge from the innermost outwards while every operand's strides nest.
  // The merged innermost run becomes one strided-batched call; the dims outside it loop on the host.
  std::vector<BatchDim> dims;
  for (int d = 0; d < s.batch_rank; ++d) {
    if (s.batch_shape[d] == 0) return true;  // nothing to compute
    if (s.batch_shape[d] > 1) {
      dims.push_back({s.batch_shape[d], s.a.batch_strides[d], s.b.batch_strides[d], s.c.batch_strides[d]});
    }
  }
  BatchDim group{1, 0, 0, 0};
  size_t outer = dims.size();
  if (!dims.empty()) {
    group = dims.back();
    outer = dims.size() - 1;
    while (outer > 0) {
      const BatchDim& d = dims[outer - 1];
      if (d.a != group.a * group.extent || d.b != group.b * group.extent || d.c != group.c * group.extent) break;
      group.extent *= d.extent;
      --outer;
    }
  }
  if (group.extent > kIntMax) return false;
  int64_t outer_count = 1;
  for (size_t d = 0; d < outer; ++d) outer_count *= dims[d].extent;

  const int64_t es = dtype_type_size(s.dtype), ces = s.c_f32 ? 4 : es;
  for (int64_t index = 0; index < outer_count; ++index) {
    int64_t a_off = 0, b_off = 0, c_off = 0, rem = index;
    for (size_t d = outer; d-- > 0;) {
      const int64_t i = rem % dims[d].extent;
      rem /= dims[d].extent;
      a_off += i * dims[d].a;
      b_off += i * dims[d].b;
      c_off += i * dims[d].c;
    }
    const char* ap = static_cast<const char*>(s.a.data) + a_off * es;
    const char* bp = static_cast<const char*>(s.b.data) + b_off * es;
    char* cp = static_cast<char*>(s.c.data) + c_off * ces;
    const bool ok = s.c_f32 ? blas->gemm_scaled(s.dtype, DType::F32, 1.0f, ta, tb, (int)s.m, (int)s.n, (int)s.k, ap,
                                                lda, group.a, bp, ldb, group.b, cp, ldc, group.c, (int)group.extent,
                                                dev.stream())
                            : blas->gemm(s.dtype, ta, tb, (int)s.m, (int)s.n, (int)s.k, ap, lda, group.a, bp, ldb,
                                         group.b, cp, ldc, group.c, (int)group.extent, dev.stream());
    if (!ok) return false;
  }
  return true;
}

void gemm_rbee(GpuDevice& dev, const GemmSpec& s) {
  RBEE_CHECK_CODE(s.c.cs == 1, ErrorCode::Internal, "gemm: C needs unit column stride, got {}", s.c.cs);
  RBEE_CHECK_CODE(!s.c_f32, ErrorCode::Internal, "gemm: rbee's kernel writes C in the operands' dtype only");
  GemmParams p{};
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = s.a.data, p.a_rs = s.a.rs, p.a_cs = s.a.cs;
  p.b = s.b.data, p.b_rs = s.b.rs, p.b_cs = s.b.cs;
  p.c = s.c.data, p.c_rs = s.c.rs;
  p.batch_rank = s.batch_rank;
  p.batch = 1;
  for (int d = 0; d < s.batch_rank; ++d) {
    p.batch_shape[d] = s.batch_shape[d];
    p.batch *= s.batch_shape[d];
    p.a_bs[d] = s.a.batch_strides[d];
    p.b_bs[d] = s.b.batch_strides[d];
    p.c_bs[d] = s.c.batch_strides[d];
  }
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  switch (s.dtype) {
    case DType::F32: return run_rbee_gemm<float, float>(dev, p);
    case DType::F16: return run_rbee_gemm<f16_t, float>(dev, p);
    case DType::BF16: return run_rbee_gemm<bf16_t, float>(dev, p);
    case DType::F64: return run_rbee_gemm<double, double>(dev, p);
    default: RBEE_THROW(ErrorCode::Unsupported, "gemm: dtype {} is not supported", dtype_name(s.dtype));
  }
}

void gemm(GpuDevice& dev, const GemmSpec& spec) {
  if (!gemm_blas(dev, spec)) gemm_rbee(dev, spec);
}

}  // namespace rbee::gpu
