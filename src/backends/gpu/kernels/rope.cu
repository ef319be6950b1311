// GPU rotary position embedding, with the CPU's numerics (cpu_rope.cpp).
//
// x [N, H, D] (last axis contiguous, any strides on N and H) -> out [N, H, D] contiguous; one thread per output
// element. The angle positions[n] * inv_freq[i] is formed in f64 and reduced to [-pi, pi] before the f32
// cos/sin (f64 inputs take cos/sin of the unreduced f64 angle), both scaled by mscale. Normal mode rotates
// pairs (2i, 2i+1), Neox pairs (i, i + rotary_dim/2); dims >= rotary_dim are copied.
#include <cmath>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
constexpr double kTwoPi = 6.283185307179586476925286766559;

template <class T>
__global__ void rope_kernel(const T* x, int64_t token_stride, int64_t head_stride, const int32_t* positions,
                            const float* inv_freq, int64_t tokens, int64_t heads, int64_t dim, int64_t rot,
                            bool neox, float mscale, T* out) {
  using C = compute_t<T>;
  const int64_t total = tokens * heads * dim, half = rot / 2;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = e % dim, h = e / dim % heads, n = e / (dim * heads);
    const T* src = x + n * token_stride + h * head_stride;
    if (d >= rot) {
      out[e] = src[d];
      continue;
    }
    // Pair index i, and the partner element with the sign its term takes.
    int64_t i, partner;
    bool first;  // first of its pair: out = x c - partner s; second: out = x c + partner s
    if (neox) {
      first = d < half;
      i = first ? d : d - half;
      partner = first ? d + half : d - half;
    } else {
      first = (d & 1) == 0;
      i = d / 2;
      partner = first ? d + 1 : d - 1;
    }
    C c, s;
    if constexpr (std::is_same_v<C, double>) {
      const double angle = (double)positions[n] * (double)inv_freq[i];
      c = cos(angle) * (double)mscale;
      s = sin(angle) * (double)mscale;
    } else {
      double a = (double)positions[n] * (double)inv_freq[i];
      a -= kTwoPi * rint(a / kTwoPi);
      const float angle = (float)a;
      c = cosf(angle) * mscale;
      s = sinf(angle) * mscale;
    }
    const C v = load(src + d), p = load(src + partner);
    store(out + e, first ? v * c - p * s : v * c + p * s);
  }
}

}  // namespace

void GpuKernels::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
                      Tensor& out) {
  device_.activate();
  const int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2);
  const int64_t total = tokens * heads * dim;
  if (total == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(
        static_cast<const T*>(x.data()), x.stride(0), x.stride(1), static_cast<const int32_t*>(positions.data()),
        static_cast<const float*>(inv_freq.data()), tokens, heads, dim, params.rotary_dim,
        params.mode == RopeMode::Neox, params.mscale, static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
