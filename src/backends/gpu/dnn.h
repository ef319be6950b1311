// A vendor convolution and attention library behind one small interface, beside blas.h: cuDNN on CUDA (opened at
// run time, src/backends/cuda/cudnn_dnn.cu), nothing on ROCm (Debian has no MIOpen: make_vendor_dnn returns nullptr there).
// Two steps, so that the caller owns the scratch memory (the device's caching allocator, also inside a graph
// capture): plan() says whether the library takes a convolution and how much workspace it needs, run() does it;
// plan_attention() / run_attention() the same for unmasked attention (cuDNN's fused flash attention).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/gpu/platform.h"
#include "rbee/core/dtype.h"

namespace rbee::gpu {

// One 2-D convolution with the epilogue of conv2d_fused (op_table.def Conv2dFused):
//   out = act(conv2d(x, w) + bias + residual), act = SiLU when silu, sums in f32, rounded once to dtype.
// NCHW as Conv2dFused's contract, all contiguous: x [n, cin, h, w], w [cout, cin, kh, kw], residual / out
// [n, cout, ho, wo]; or, when channels_last (Conv2dFusedNhwc), x [n, h, w, cin], w [cout, kh, kw, cin], residual / out
// [n, ho, wo, cout]. bias [cout], or [n, cout] when bias_per_image (a row per image). groups 1. align: the largest
// power of two up to 16 dividing every pointer run() gets (in bytes).
struct DnnConv2d {
  DType dtype = DType::F16;  // F16 or BF16 for x, w, bias, residual and out alike
  int n = 0, cin = 0, h = 0, w = 0, cout = 0, kh = 0, kw = 0, ho = 0, wo = 0;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool bias = false, bias_per_image = false, residual = false, silu = false;  // which epilogue terms run() gets
  bool channels_last = false;                                                 // NHWC / KRSC tensors
  int align = 16;
  // Every field, for maps keyed by the convolution.
  std::array<int, 22> key() const {
    return {(int)dtype, n,     cin,   h,          w,          cout, kh,             kw,       ho,   wo,   stride_h,
            stride_w,   pad_h, pad_w, dilation_h, dilation_w, bias, bias_per_image, residual, silu, channels_last,
            align};
  }
};

// One unmasked scaled-dot-product attention (op_table.def Attention without causal, window or softcap):
//   out[b, h, i, :] = sum_j softmax_j(scale * q[b, h, i, :] . k[b, h, j, :]) v[b, h, j, :]
// q [b, h, tq, d], k and v [b, h, tk, d], out [b, h, tq, d], each with its own element strides for the first three
// axes (any order, e.g. heads and positions interleaved as in [b, t, h * d] storage) and a unit last stride. Scores
// and softmax in f32, the probabilities rounded to dtype before P.V (as rbee's flash kernel), P.V summed in f32, out
// rounded once. align: the largest power of two up to 16 dividing every pointer run_attention() gets (in bytes).
struct DnnAttention {
  DType dtype = DType::F16;  // F16 or BF16 for q, k, v and out alike
  int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  std::array<int64_t, 3> q_strides{}, k_strides{}, v_strides{}, o_strides{};  // [b, h, t] strides in elements
  int align = 16;
  // Every field, for maps keyed by the attention (the scale is a run-time value, not part of the plan).
  std::array<int64_t, 19> key() const {
    return {(int64_t)dtype, b,           h,           tq,          tk,          d,           q_strides[0],
            q_strides[1],   q_strides[2], k_strides[0], k_strides[1], k_strides[2], v_strides[0], v_strides[1],
            v_strides[2],   o_strides[0], o_strides[1], o_strides[2], align};
  }
};

class Dnn {
 public:
  virtual ~Dnn() = default;
  virtual const char* name() const = 0;
  // Whether run() takes `c`; *workspace_bytes receives the scratch it needs then. The first call for a shape
  // prepares it (descriptors, the library's checks) and must come outside a graph capture (may_prepare = false
  // while capturing: an unprepared shape is refused). Later calls answer from a cache.
  virtual bool plan(const DnnConv2d& c, bool may_prepare, size_t* workspace_bytes) = 0;
  // out as DnnConv2d says, ordered on `stream`; bias / residual null when c says absent (neither aliases out).
  // workspace: at least the bytes plan() returned (may be null when that is 0). may_tune: outside a graph capture,
  // so the first call of a shape may time the library's candidate kernels on these operands (and synchronize) to
  // keep the fastest (cudnn_dnn.cu: RBEE_CONV_CUDNN_TUNE=1). Returns false, having written nothing, when the library
  // refuses the call; the shape is then refused from now on (plan() returns false for it).
  virtual bool run(const DnnConv2d& c, const void* x, const void* w, const void* bias, const void* residual, void* out,
                   void* workspace, size_t workspace_bytes, bool may_tune, Stream stream) = 0;

  // Attention, in the same two steps: whether run_attention() takes `a` (preparing it on the first call of a shape,
  // outside graph captures only) and the scratch it needs; then the attention on `stream`, scale given per call.
  // run_attention() returns false, having written nothing, when the library refuses; the shape is refused from then.
  virtual bool plan_attention(const DnnAttention& a, bool may_prepare, size_t* workspace_bytes) = 0;
  virtual bool run_attention(const DnnAttention& a, float scale, const void* q, const void* k, const void* v,
                             void* out, void* workspace, size_t workspace_bytes, Stream stream) = 0;

  // Frees the library's plans and handle now, while the library is loaded and usable (a device's empty_cache(), when
  // no captured graph holds a launch of the library's kernels); later calls prepare them again. Without it they are
  // left to the process's end (cudnn_dnn.cu says why). Default: nothing held.
  virtual void release() noexcept {}
};

// The convolution library of this build for the current device, or nullptr when absent (cuDNN not installed,
// ROCm). `why` receives a sentence for the logs.
std::unique_ptr<Dnn> make_vendor_dnn(std::string* why);

}  // namespace rbee::gpu
