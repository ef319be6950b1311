// CPU convolution family. (Placeholder bodies until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::conv1d(const Tensor&, const Tensor&, const Conv1dParams&, Tensor&) { unsupported(OpKind::Conv1d); }
void CpuKernels::conv2d(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) { unsupported(OpKind::Conv2d); }
void CpuKernels::conv_transpose1d(const Tensor&, const Tensor&, const Conv1dParams&, Tensor&) { unsupported(OpKind::ConvTranspose1d); }
void CpuKernels::conv_transpose2d(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) { unsupported(OpKind::ConvTranspose2d); }
void CpuKernels::im2col(const Tensor&, int, int, const Conv2dParams&, Tensor&) { unsupported(OpKind::Im2col); }
void CpuKernels::pool2d(PoolOp, const Tensor&, const Pool2dParams&, Tensor&) { unsupported(OpKind::Pool2d); }
void CpuKernels::upsample_nearest2d(const Tensor&, Tensor&) { unsupported(OpKind::UpsampleNearest2d); }
}  // namespace rbee::cpu
