// GPU attention for long unmasked sequences (Stable Diffusion's self- and cross-attention over latent pixels:
// 4096 queries x 4096 keys x 8 heads at 512x512) on the vendor BLAS's tensor cores. Per batch index, per group of
// query heads that share one key/value layout, and per chunk of cq queries:
//   S [heads, cq, Tk] (T) = scale * Q K^T        one strided-batched GEMM (Blas::gemm_scaled): f32 sums, the
//                                                scale applied before S is rounded to T (logits, not raw dots)
//   P = softmax(S) by rows, in place             one kernel: max, sum of exp(s - max), then the quotients (f32)
//   O [heads, cq, Dv] (T) = P V                  one strided-batched GEMM written into out
// The chunk bounds S to about kScoreBudget scores, so it stays in L2 between the three launches. Grouped-query
// heads: one call per kv head with the key/value batch stride 0. Against the flash kernel (attention.cu) this
// rounds the logits and P to T (PyTorch's math attention in fp16 does the same), so 16-bit results differ from
// it by a few units of T's precision.
#include "backends/gpu/kernels/attention_gemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/gpu/blas.h"
#include "backends/gpu/gpu_device.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kScoreBudget = int64_t{1} << 24;  // scores of S per chunk: 32 MiB of 16-bit values
constexpr int64_t kMaxChunkRows = 1024;              // query rows per chunk (also for calls of few heads)
constexpr int64_t kMinSeq = 32;                      // shorter query or key ranges take the flash kernel

// p [rows, n] = softmax of each row of s [rows, n], both with row stride ld; p may be s (every element is read
// and then written by the same lane). One warp per row: pass 1 reads the row once, each lane keeping a running
// (max m, sum l of exp(x - m)) merged across the warp with shuffles; pass 2 reads it again (from L2: the chunk
// was sized for it) and writes exp(x - m) / l. V elements per access: 16-byte vectors when the host checked the
// alignment (n and ld multiples of V, s and p 16-byte aligned), else V = 1.
template <class T, int V>
__global__ void softmax_rows_warp_kernel(const T* s, int64_t rows, int64_t n, int64_t ld, T* p) {
  constexpr int kW = RBEE_DEVICE_WARP_SIZE;
  const int lane = threadIdx.x % kW, warps = blockDim.x / kW;
  // The loop bound is the same for the whole block (a warp past the last row idles through the shuffles).
  for (int64_t base = (int64_t)blockIdx.x * warps; base < rows; base += (int64_t)gridDim.x * warps) {
    const int64_t r = base + threadIdx.x / kW;
    const int64_t len = r < rows ? n : 0;
    const T* sr = s + r * ld;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = (int64_t)lane * V; j < len; j += (int64_t)kW * V) {
      float x[V];
      load_vec<T, V>(sr + j, x);
      float mv = x[0];
#pragma unroll
      for (int k = 1; k < V; ++k) mv = fmaxf(mv, x[k]);
      const float m2 = fmaxf(m, mv);
      float add = 0.0f;
#pragma unroll
      for (int k = 0; k < V; ++k) add += exp_c(x[k] - m2);
      l = (m == -INFINITY ? 0.0f : l * exp_c(m - m2)) + add;
      m = m2;
    }
    for (int o = kW / 2; o > 0; o >>= 1) {
      const float mo = shfl_xor(m, o), lo = shfl_xor(l, o);
      const float m2 = fmaxf(m, mo);
      l = (m == -INFINITY ? 0.0f : l * exp_c(m - m2)) + (mo == -INFINITY ? 0.0f : lo * exp_c(mo - m2));
      m = m2;
    }
    const float inv = 1.0f / l;
    T* pr = p + r * ld;
    for (int64_t j = (int64_t)lane * V; j < len; j += (int64_t)kW * V) {
      float x[V];
      load_vec<T, V>(sr + j, x);
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] = exp_c(x[k] - m) * inv;
      store_vec<T, V>(pr + j, x);
    }
  }
}

template <class T>
void softmax_rows(GpuDevice& dev, const T* s, int64_t rows, int64_t n, int64_t ld, T* p) {
  constexpr int kV = kVec16<T>;
  const int per_block = kThreads / dev.props().warp_size;
  const unsigned blocks = blocks_for(rows, per_block);
  if (vec16_ok({s, p}, {n, ld}, kV)) {
    softmax_rows_warp_kernel<T, kV><<<blocks, kThreads, 0, dev.stream()>>>(s, rows, n, ld, p);
  } else {
    softmax_rows_warp_kernel<T, 1><<<blocks, kThreads, 0, dev.stream()>>>(s, rows, n, ld, p);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace

bool attention_gemm(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                    Tensor& out) {
  const DType dtype = q.dtype();
  Blas* blas = dev.blas();
  if (!blas || (dtype != DType::F16 && dtype != DType::BF16)) return false;
  if (params.causal || params.window > 0 || params.softcap > 0) return false;
  const int64_t B = q.dim(0), Hq = q.dim(1), Tq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Tk = k.dim(2), Dv = v.dim(3);
  if (Tq < kMinSeq || Tk < kMinSeq || D == 0 || Dv == 0 || Hkv == 0 || Hq % Hkv != 0) return false;
  if (q.stride(3) != 1 || k.stride(3) != 1 || v.stride(3) != 1 || out.stride(3) != 1) return false;
  if (q.stride(2) < D || k.stride(2) < D || v.stride(2) < Dv || out.stride(2) < Dv) return false;
  const int64_t int_max = 0x7fffffff;
  if (q.stride(2) > int_max || k.stride(2) > int_max || v.stride(2) > int_max || out.stride(2) > int_max ||
      Tk > int_max)
    return false;

  // Heads handled by one call: all q heads (their own k/v heads) without grouping, else the group of one kv head.
  const int64_t group = Hq / Hkv;
  const int64_t calls = group == 1 ? 1 : Hkv, heads = group == 1 ? Hq : group;
  const int64_t kv_head_stride_k = group == 1 ? k.stride(1) : 0, kv_head_stride_v = group == 1 ? v.stride(1) : 0;
  // Rows of S and P padded to 8 elements, so every row of P starts 16-byte aligned (tensor-core operand).
  const int64_t ld = ceil_div(Tk, 8) * 8;
  const int64_t cq = std::clamp<int64_t>(kScoreBudget / (heads * ld), 1, std::min(Tq, kMaxChunkRows));
  const Tensor s_store = Tensor::empty({heads * cq * ld}, dtype, dev);
  const int64_t esize = dtype_type_size(dtype);
  auto at = [&](const Tensor& t, int64_t offset) {
    return static_cast<const char*>(t.data()) + offset * esize;
  };
  bool ok = true;
  visit_float_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>) {
      T* s = static_cast<T*>(s_store.data());  // S, then P in place
      for (int64_t b = 0; b < B && ok; ++b) {
        for (int64_t c = 0; c < calls && ok; ++c) {
          const int64_t h0 = c * heads;  // first q head of this call; its kv head is c when grouped
          for (int64_t i0 = 0; i0 < Tq && ok; i0 += cq) {
            const int64_t n = std::min(cq, Tq - i0);
            const void* qp = at(q, b * q.stride(0) + h0 * q.stride(1) + i0 * q.stride(2));
            const void* kp = at(k, b * k.stride(0) + (group == 1 ? 0 : c) * k.stride(1));
            const void* vp = at(v, b * v.stride(0) + (group == 1 ? 0 : c) * v.stride(1));
            void* op = static_cast<char*>(out.data()) +
                       (b * out.stride(0) + h0 * out.stride(1) + i0 * out.stride(2)) * esize;
            // S[h] [n, Tk] = scale * Q[h] [n, D] . (K[h] [Tk, D])^T
            ok = blas->gemm_scaled(dtype, dtype, params.scale, false, true, (int)n, (int)Tk, (int)D, qp,
                                   q.stride(2), q.stride(1), kp, k.stride(2), kv_head_stride_k, s, ld, n * ld,
                                   (int)heads, dev.stream());
            if (!ok) break;
            softmax_rows<T>(dev, s, heads * n, Tk, ld, s);
            // O[h] [n, Dv] = P[h] [n, Tk] . V[h] [Tk, Dv], into out's rows i0 .. i0 + n of each head
            ok = blas->gemm_scaled(dtype, dtype, 1.0f, false, false, (int)n, (int)Dv, (int)Tk, s, ld, n * ld, vp,
                                   v.stride(2), kv_head_stride_v, op, out.stride(2), out.stride(1), (int)heads,
                                   dev.stream());
          }
        }
      }
    } else {
      ok = false;
    }
  });
  return ok;
}

}  // namespace rbee::gpu
