// conv2d_fused as one vendor GEMM with its epilogue (conv_fused_gemm.h). Per image i of N, row-major:
//   out[i] [Cout, P] = w [Cout, K] . B[i] [K, P] + bias[i?] [Cout] + residual[i] [Cout, P]      (P = Ho * Wo)
// with K = Cin * KH * KW and B[i] = x[i] viewed as [Cin, H * W] (1x1 kernels of unit stride, no padding) or the
// im2col columns of image i (conv_columns.cuh), all images' columns built by one launch before the product.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/common/conv_geometry.h"
#include "backends/gpu/blas.h"
#include "backends/gpu/gpu_device.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/conv_columns.cuh"
#include "backends/gpu/kernels/conv_fused_gemm.h"
#include "backends/gpu/kernels/ops_common.cuh"
#include "rbee/core/error.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

// RBEE_CONV_FUSED_GEMM: 0 off, 1 (1x1 kernels only, "1x1"), else (default) every shape the library takes.
int fused_gemm_mode() {
  static const int mode = [] {
    const char* env = std::getenv("RBEE_CONV_FUSED_GEMM");
    if (env && std::string_view(env) == "0") return 0;
    if (env && std::string_view(env) == "1x1") return 1;
    return 2;
  }();
  return mode;
}

}  // namespace

bool conv2d_fused_gemm(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                       const Conv2dParams& cp, bool silu, Tensor& out) {
  const int mode = fused_gemm_mode();
  const DType dt = x.dtype();
  Blas* blas = dev.blas();
  if (mode == 0 || !blas || silu || cp.groups != 1 || (dt != DType::F16 && dt != DType::BF16)) return false;
  const conv::ConvGeometry g = conv::geometry_2d(x, w, out, cp);
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  if (mode == 1 && !pointwise) return false;
  const int64_t depth = g.cin * g.kh * g.kw, positions = g.ho * g.wo, lim = 0x7fffffff;
  if (g.cout > lim || positions > lim || depth > lim || g.n > 65535) return false;
  // Columns of every image at once, within the 16-bit column budget (larger calls: conv.cu's chunked paths).
  if (!pointwise && (depth * g.n * positions * 2 > column_bytes16() || !fits_row_columns(g, g.n, positions)))
    return false;

  Tensor cols;
  const void* b = x.data();
  int64_t stride_b = g.cin * positions;  // pointwise: x[i] is [Cin, H * W] with H * W == P
  if (!pointwise) {
    cols = Tensor::empty({g.n * depth * positions}, dt, dev);
    stride_b = depth * positions;
    visit_float_storage(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, compute_t<T>>) {
        const dim3 grid((unsigned)std::min<int64_t>(ceil_div(positions, kThreads * kRowPer), 64), (unsigned)depth,
                        (unsigned)g.n);
        conv_row_columns_kernel<T><<<grid, kThreads, 0, dev.stream()>>>(static_cast<const T*>(x.data()), g, 0, 0,
                                                                        (int)positions, stride_b, positions,
                                                                        static_cast<T*>(cols.data()));
        RBEE_GPU_CHECK_LAUNCH();
      }
    });
    b = cols.data();
  }
  const int64_t es = dtype_type_size(dt), o_image = g.cout * positions;
  const int64_t bias_stride = bias && bias->rank() == 2 ? g.cout : 0;
  const bool may_plan = !dev.capturing();
  const char* bp = bias ? static_cast<const char*>(bias->data()) : nullptr;
  const char* rp = residual ? static_cast<const char*>(residual->data()) : nullptr;
  char* op = static_cast<char*>(out.data());
  const char* bb = static_cast<const char*>(b);
  // All images in one call (the bias batch-strided for a [N, Cout] bias) ...
  if (blas->gemm_conv_epilogue(dt, (int)g.cout, (int)positions, (int)depth, (int)g.n, w.data(), depth, bb, positions,
                               stride_b, bp, bias_stride, rp, op, positions, o_image, may_plan, dev.stream()))
    return true;
  if (g.n == 1) return false;
  // ... or one call per image where the library refuses the batched form.
  for (int64_t i = 0; i < g.n; ++i) {
    const bool ok = blas->gemm_conv_epilogue(
        dt, (int)g.cout, (int)positions, (int)depth, 1, w.data(), depth, bb + i * stride_b * es, positions, stride_b,
        bp ? bp + i * bias_stride * es : nullptr, bias_stride, rp ? rp + i * o_image * es : nullptr,
        op + i * o_image * es, positions, o_image, may_plan, dev.stream());
    if (!ok) {
      RBEE_CHECK_CODE(i == 0, ErrorCode::Internal, "conv2d_fused: the vendor Blas refused a product it took before");
      return false;
    }
  }
  return true;
}

}  // namespace rbee::gpu
