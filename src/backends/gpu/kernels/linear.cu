// GPU fused linear layer (op_table.def LinearFused): out [M, N] = x [M, K] . w [N, K]^T + bias [N] + residual [M, N],
// summed in f32 and rounded once.
//
// Paths, first that applies: the vendor Blas's fused product (cuBLASLt: bias in the GEMM's epilogue, the residual as
// C with beta = 1, one kernel); the vendor Blas's product into f32 sums (Blas::gemm_f32_out) and linear_epilogue_kernel;
// rbee's tiled GEMM on f32 copies of the operands into f32 sums and the same epilogue.
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/gemm.h"
#include "backends/gpu/kernels/ops_common.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

// out[i][j] = sum[i][j] + bias[j] + residual[i][j], rounded once. One block row per output row (grid.y strides).
template <class T>
__global__ void linear_epilogue_kernel(const float* sum, const T* bias, const T* residual, int64_t m, int64_t n,
                                       T* out) {
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
      float v = sum[i * n + j];
      if (bias) v += (float)load(bias + j);
      if (residual) v += (float)load(residual + i * n + j);
      store(out + i * n + j, (compute_t<T>)v);
    }
  }
}

template <class T>
__global__ void widen_to_f32_kernel(const T* src, int64_t count, float* dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = (float)load(src + i);
}

}  // namespace

void GpuKernels::linear_fused(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                              Tensor& out) {
  device_.activate();
  const int64_t m = out.dim(0), n = out.dim(1), k = x.dim(1);
  if (m == 0 || n == 0) return;
  const DType dt = x.dtype();
  Blas* blas = device_.blas();
  const void* bp = bias ? bias->data() : nullptr;
  const void* rp = residual ? residual->data() : nullptr;
  constexpr int64_t kIntMax = 0x7fffffff;
  const bool int_sizes = m <= kIntMax && n <= kIntMax && k <= kIntMax;
  if (blas && int_sizes && k > 0 &&
      blas->gemm_bias(dt, (int)m, (int)n, (int)k, x.data(), w.data(), bp, rp, out.data(), device_.stream()))
    return;
  const Tensor sum = Tensor::empty({m, n}, DType::F32, device_);
  float* sp = static_cast<float*>(sum.data());
  bool done = false;
  if (blas && int_sizes && k > 0) {
    // Row-major C [m, n] = x [m, k] . (w stored [n, k])^T.
    done = blas->gemm_f32_out(dt, false, true, (int)m, (int)n, (int)k, x.data(), k, w.data(), k, sp, n, 0.0f,
                              device_.stream());
  }
  visit_float_storage(dt, [&](auto tag) {
    using T = decltype(tag);
    if (!done) {
      GemmSpec s;
      s.dtype = DType::F32;
      s.m = m;
      s.n = n;
      s.k = k;
      Tensor xw, ww;
      const float* xf = static_cast<const float*>(x.data());
      const float* wf = static_cast<const float*>(w.data());
      if constexpr (!std::is_same_v<T, float>) {
        xw = Tensor::empty({x.numel()}, DType::F32, device_);
        ww = Tensor::empty({w.numel()}, DType::F32, device_);
        widen_to_f32_kernel<T><<<grid_for(x.numel(), kThreads), kThreads, 0, device_.stream()>>>(
            static_cast<const T*>(x.data()), x.numel(), static_cast<float*>(xw.data()));
        RBEE_GPU_CHECK_LAUNCH();
        widen_to_f32_kernel<T><<<grid_for(w.numel(), kThreads), kThreads, 0, device_.stream()>>>(
            static_cast<const T*>(w.data()), w.numel(), static_cast<float*>(ww.data()));
        RBEE_GPU_CHECK_LAUNCH();
        xf = static_cast<const float*>(xw.data());
        wf = static_cast<const float*>(ww.data());
      }
      s.a = {const_cast<float*>(xf), k, 1, {}};
      s.b = {const_cast<float*>(wf), 1, k, {}};  // w^T: element (kk, j) at w + j * k + kk
      s.c = {sp, n, 1, {}};
      gemm_rbee(device_, s);
    }
    const dim3 grid((unsigned)std::min<int64_t>(ceil_div(n, kThreads), 64), (unsigned)std::min<int64_t>(m, 65535));
    linear_epilogue_kernel<T><<<grid, kThreads, 0, device_.stream()>>>(
        sp, static_cast<const T*>(bp), static_cast<const T*>(rp), m, n, static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
