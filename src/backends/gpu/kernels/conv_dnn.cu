// conv2d_fused and conv2d_fused_nhwc through the vendor convolution library (conv_dnn.h). Shapes (the ops' contracts):
//   NCHW: x [N, Cin, H, W], w [Cout, Cin, KH, KW], residual / out [N, Cout, Ho, Wo];
//   NHWC: x [N, H, W, Cin], w [Cout, KH, KW, Cin], residual / out [N, Ho, Wo, Cout]; bias [Cout] or [N, Cout].
// A [N, Cout] bias (SD's time embedding folded into the resnet's first convolution) is one library call over all
// images where the library broadcasts it, else one call per image on image-sized views (cuDNN 9.14: always the
// latter; docs/perf-notes/sd-speed.md, session 8).
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
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

// RBEE_CONV_CUDNN: 0 off, 1 every shape the library takes, else (default) the chosen shapes.
int dnn_mode() {
  static const int mode = [] {
    const std::optional<bool> forced = env::flag("RBEE_CONV_CUDNN");
    return forced ? (*forced ? 1 : 0) : 2;
  }();
  return mode;
}

// The default choice per shape, from the per-shape timings of docs/perf-notes/sd-speed.md (session 8, H200, cuDNN
// 9.14 graph API against im2col + cuBLAS + epilogue): cuDNN's fused kernels win on k x k kernels (k > 1) of stride 1
// over large maps (0.31-0.91 of the time from 4096 positions per call: SD's 64x64 level, every 3x3 convolution of
// the VAE decoder) and lose on smaller maps (1.14-2.1x at 32x32 and below: no split-K), on stride 2 and on 1x1
// kernels (1.4-1.9x: one cuBLAS GEMM reads x in place). A [N, Cout] bias on SD's 64x64 maps measured even
// (0.92-1.10), so per-image bias needs 4x the positions.
// Channels last (conv2d_fused_nhwc): the library's NHWC tensor-core kernels read the layout natively (its NCHW
// path converts), and the alternative is a permuted copy of x, w and out around the channels-first paths, so every
// k x k kernel (k > 1) goes to the library; 1x1 kernels of stride 1 are linear layers (conv_nhwc.cu).
bool chosen_by_default(const DnnConv2d& c) {
  if (c.channels_last) return c.kh * c.kw > 1;
  if (c.kh * c.kw == 1 || c.stride_h != 1 || c.stride_w != 1) return false;
  const int64_t positions = (int64_t)c.ho * c.wo;
  return c.bias_per_image ? positions >= 16384 : positions * c.n >= 4096;
}

// The largest power of two up to 16 that divides the address.
int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && v % (uintptr_t)a != 0) a /= 2;
  return a;
}
int alignment_of_bytes(int64_t bytes) { return alignment_of(reinterpret_cast<const void*>((uintptr_t)bytes)); }

}  // namespace

bool conv2d_dnn(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                const Conv2dParams& cp, bool silu, Tensor& out, bool channels_last) {
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
  c.n = (int)n;
  c.channels_last = channels_last;
  // Axes of (channels, rows, columns) in x / out, and of (rows, columns) in w.
  const int ch = channels_last ? 3 : 1, row = channels_last ? 1 : 2, col = row + 1, wrow = channels_last ? 1 : 2;
  c.cin = (int)x.dim(ch);
  c.h = (int)x.dim(row);
  c.w = (int)x.dim(col);
  c.cout = (int)out.dim(ch);
  c.kh = (int)w.dim(wrow);
  c.kw = (int)w.dim(wrow + 1);
  c.ho = (int)out.dim(row);
  c.wo = (int)out.dim(col);
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
  const int64_t es = dtype_type_size(dt);
  const int64_t x_image = (int64_t)c.cin * c.h * c.w, o_image = (int64_t)c.cout * c.ho * c.wo;
  const int align = std::min({alignment_of(x.data()), alignment_of(w.data()), alignment_of(out.data()),
                              bias ? alignment_of(bias->data()) : 16, residual ? alignment_of(residual->data()) : 16});
  c.align = align;
  const bool uncaptured = !dev.capturing();
  size_t ws_bytes = 0;
  int64_t calls = 1;  // library calls: 1, or one per image for a [n, cout] bias the library cannot broadcast
  // Channels last, a [n, cout] bias is never handed to the library as one n-row tensor: cuDNN 9 finalized that graph
  // for NHWC on an H100 and then wrote wrong sums from the second output position on, or faulted on a misaligned
  // address (docs/perf-notes/sd-speed.md, session 10); one call per image on [cout] rows instead.
  const bool rows_refused = c.channels_last && c.bias_per_image;
  if (rows_refused || !dnn->plan(c, uncaptured, &ws_bytes)) {
    if (!c.bias_per_image) return false;
    c.n = 1;
    c.bias_per_image = false;
    c.align = std::min({align, alignment_of_bytes(x_image * es), alignment_of_bytes(o_image * es),
                        alignment_of_bytes(c.cout * es)});
    if (!dnn->plan(c, uncaptured, &ws_bytes)) return false;
    calls = n;
  }
  const Tensor workspace = ws_bytes ? Tensor::empty({(int64_t)ws_bytes}, DType::U8, dev) : Tensor();
  for (int64_t i = 0; i < calls; ++i) {
    const int64_t xo = calls > 1 ? i * x_image : 0, oo = calls > 1 ? i * o_image : 0, bo = calls > 1 ? i * c.cout : 0;
    const char* xp = static_cast<const char*>(x.data()) + xo * es;
    const char* bp = bias ? static_cast<const char*>(bias->data()) + bo * es : nullptr;
    const char* rp = residual ? static_cast<const char*>(residual->data()) + oo * es : nullptr;
    char* op = static_cast<char*>(out.data()) + oo * es;
    if (!dnn->run(c, xp, w.data(), bp, rp, op, ws_bytes ? workspace.data() : nullptr, ws_bytes, uncaptured,
                  dev.stream())) {
      // Refused before anything was written (the library checks its arguments before launching).
      RBEE_CHECK_CODE(i == 0, ErrorCode::Internal,
                      "conv2d_fused: the convolution library refused a call it took before");
      return false;
    }
  }
  return true;
}

}  // namespace rbee::gpu
