// A vendor convolution library behind one small interface, beside blas.h: cuDNN on CUDA (opened at run time,
// src/backends/cuda/cudnn_dnn.cu), nothing on ROCm (Debian has no MIOpen: make_vendor_dnn returns nullptr there).
// Two steps, so that the caller owns the scratch memory (the device's caching allocator, also inside a graph
// capture): plan() says whether the library takes a convolution and how much workspace it needs, run() does it.
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
// NCHW as the op's contract, all contiguous: x [n, cin, h, w], w [cout, cin, kh, kw], residual / out [n, cout, ho, wo],
// bias [cout], or [n, cout] when bias_per_image (a row per image). groups 1. align: the largest power of two up to 16
// dividing every pointer run() gets (in bytes).
struct DnnConv2d {
  DType dtype = DType::F16;  // F16 or BF16 for x, w, bias, residual and out alike
  int n = 0, cin = 0, h = 0, w = 0, cout = 0, kh = 0, kw = 0, ho = 0, wo = 0;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool bias = false, bias_per_image = false, residual = false, silu = false;  // which epilogue terms run() gets
  int align = 16;
  // Every field, for maps keyed by the convolution.
  std::array<int, 21> key() const {
    return {(int)dtype, n,     cin,   h,          w,          cout, kh,             kw,       ho,   wo,   stride_h,
            stride_w,   pad_h, pad_w, dilation_h, dilation_w, bias, bias_per_image, residual, silu, align};
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
};

// The convolution library of this build for the current device, or nullptr when absent (cuDNN not installed,
// ROCm). `why` receives a sentence for the logs.
std::unique_ptr<Dnn> make_vendor_dnn(std::string* why);

}  // namespace rbee::gpu
