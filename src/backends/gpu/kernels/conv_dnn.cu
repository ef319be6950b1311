// conv2d_fused through the vendor convolution library (conv_dnn.h). Shapes (NCHW as the op's contract):
//   x [N, Cin, H, W], w [Cout, Cin, KH, KW], bias [Cout] or [N, Cout], residual / out [N, Cout, Ho, Wo].
// A [N, Cout] bias (SD's time embedding folded into the resnet's first convolution) is broadcast by the library
// where it can (cuDNN's graph API), else one call per image on image-sized views (the legacy call). With RBEE_CONV_CUDNN_LAYOUT=nhwc, x, w and the residual
// are copied to NHWC / [Cout, KH, KW, Cin] first and the NHWC result copied back into out (exact copies: the A/B
// of cuDNN's own handling of NCHW against a channels-last convolution with rbee's transposes at its edges).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "backends/gpu/dnn.h"
#include "backends/gpu/gpu_device.h"
#include "backends/gpu/kernels/conv_dnn.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"

namespace rbee::gpu {

namespace {

// RBEE_CONV_CUDNN: 0 off, 1 every shape the library takes, else (default) the chosen shapes.
int dnn_mode() {
  static const int mode = [] {
    const char* env = std::getenv("RBEE_CONV_CUDNN");
    if (env && std::string_view(env) == "0") return 0;
    if (env && std::string_view(env) == "1") return 1;
    return 2;
  }();
  return mode;
}

bool nhwc_layout() {
  static const bool nhwc = [] {
    const char* env = std::getenv("RBEE_CONV_CUDNN_LAYOUT");
    return env && std::string_view(env) == "nhwc";
  }();
  return nhwc;
}

// The default choice per shape (c.n: images per library call).
bool chosen_by_default(const DnnConv2d& c) {
  (void)c;
  return true;
}

}  // namespace

namespace {

// The largest power of two up to 16 that divides the address.
int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && v % (uintptr_t)a != 0) a /= 2;
  return a;
}

}  // namespace

bool conv2d_dnn(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                const Conv2dParams& cp, bool silu, Tensor& out) {
  const int mode = dnn_mode();
  const DType dt = x.dtype();
  if (mode == 0 || (dt != DType::F16 && dt != DType::BF16) || cp.groups != 1) return false;
  Dnn* dnn = dev.dnn();
  if (!dnn) {
    static std::once_flag logged;
    std::call_once(logged, [&] { log::info("{}: {}", dev.id(), dev.dnn_note()); });
    return false;
  }
  const int64_t n = x.dim(0);
  DnnConv2d c;
  c.dtype = dt;
  c.nhwc = nhwc_layout();
  c.n = (int)n;
  c.cin = (int)x.dim(1);
  c.h = (int)x.dim(2);
  c.w = (int)x.dim(3);
  c.cout = (int)out.dim(1);
  c.kh = (int)w.dim(2);
  c.kw = (int)w.dim(3);
  c.ho = (int)out.dim(2);
  c.wo = (int)out.dim(3);
  c.stride_h = cp.stride_h;
  c.stride_w = cp.stride_w;
  c.pad_h = cp.pad_h;
  c.pad_w = cp.pad_w;
  c.dilation_h = cp.dilation_h;
  c.dilation_w = cp.dilation_w;
  c.bias = bias != nullptr;
  c.bias_per_image = bias && bias->rank() == 2 && n > 1;
  c.residual = residual != nullptr;
  c.silu = silu;
  if (mode == 2 && !chosen_by_default(c)) return false;
  const size_t es = (size_t)dtype_type_size(dt);
  const int64_t x_image = (int64_t)c.cin * c.h * c.w, o_image = (int64_t)c.cout * c.ho * c.wo;
  // NHWC copies are made below; their buffers come from the allocator like out's (aligned alike).
  int align = std::min({alignment_of(x.data()), alignment_of(w.data()), alignment_of(out.data()),
                        bias ? alignment_of(bias->data()) : 16, residual ? alignment_of(residual->data()) : 16});
  c.align = align;
  const bool may_prepare = !dev.capturing();
  size_t ws_bytes = 0;
  int64_t calls = 1;  // library calls: 1, or one per image for a [n, cout] bias the library cannot broadcast
  if (!dnn->plan(c, may_prepare, &ws_bytes)) {
    if (!c.bias_per_image) return false;
    c.n = 1;
    c.bias_per_image = false;
    c.align = std::min({align, alignment_of(reinterpret_cast<const void*>(x_image * (int64_t)es)),
                        alignment_of(reinterpret_cast<const void*>(o_image * (int64_t)es)),
                        alignment_of(reinterpret_cast<const void*>(c.cout * (int64_t)es))});
    if (!dnn->plan(c, may_prepare, &ws_bytes)) return false;
    calls = n;
  }
  const Tensor workspace = ws_bytes ? Tensor::empty({(int64_t)ws_bytes}, DType::U8, dev) : Tensor();

  // The operands in the library's layout: the tensors themselves (NCHW), or NHWC copies.
  Tensor xl = x, wl = w, rl = residual ? *residual : Tensor(), ol = out;
  if (c.nhwc) {
    xl = Tensor::empty({n, c.h, c.w, c.cin}, dt, dev);
    dev.copy_elements(x.permute({0, 2, 3, 1}), xl);
    wl = Tensor::empty({c.cout, c.kh, c.kw, c.cin}, dt, dev);
    dev.copy_elements(w.permute({0, 2, 3, 1}), wl);
    if (residual) {
      rl = Tensor::empty({n, c.ho, c.wo, c.cout}, dt, dev);
      dev.copy_elements(residual->permute({0, 2, 3, 1}), rl);
    }
    ol = Tensor::empty({n, c.ho, c.wo, c.cout}, dt, dev);
  }
  const int64_t bias_step = calls > 1 ? c.cout : 0;
  for (int64_t i = 0; i < calls; ++i) {
    const int64_t xo = calls > 1 ? i * x_image : 0, oo = calls > 1 ? i * o_image : 0;
    const char* xp = static_cast<const char*>(xl.data()) + xo * (int64_t)es;
    const char* bp = bias ? static_cast<const char*>(bias->data()) + i * bias_step * (int64_t)es : nullptr;
    const char* rp = residual ? static_cast<const char*>(rl.data()) + oo * (int64_t)es : nullptr;
    char* op = static_cast<char*>(ol.data()) + oo * (int64_t)es;
    if (!dnn->run(c, xp, wl.data(), bp, rp, op, ws_bytes ? workspace.data() : nullptr, ws_bytes, dev.stream())) {
      // Refused before anything was written (the library checks its arguments before launching).
      RBEE_CHECK_CODE(i == 0, ErrorCode::Internal,
                      "conv2d_fused: the convolution library refused a call it took before");
      return false;
    }
  }
  if (c.nhwc) dev.copy_elements(ol.permute({0, 3, 1, 2}), out);
  return true;
}

}  // namespace rbee::gpu
