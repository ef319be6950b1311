// CPU norms, rope, attention, swiglu. (Placeholder bodies until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::rms_norm(const Tensor&, const Tensor*, float, Tensor&) { unsupported(OpKind::RmsNorm); }
void CpuKernels::layer_norm(const Tensor&, const Tensor*, const Tensor*, float, Tensor&) { unsupported(OpKind::LayerNorm); }
void CpuKernels::group_norm(const Tensor&, int, const Tensor*, const Tensor*, float, Tensor&) { unsupported(OpKind::GroupNorm); }
void CpuKernels::rope(const Tensor&, const Tensor&, const Tensor&, const RopeParams&, Tensor&) { unsupported(OpKind::Rope); }
void CpuKernels::attention(const Tensor&, const Tensor&, const Tensor&, const AttentionParams&, Tensor&) { unsupported(OpKind::Attention); }
void CpuKernels::swiglu(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Swiglu); }
void CpuKernels::add_rms_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&) { unsupported(OpKind::AddRmsNorm); }
}  // namespace rbee::cpu
