// CPU indexing ops. (Placeholder bodies until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::index_select(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::IndexSelect); }
void CpuKernels::gather(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::Gather); }
void CpuKernels::index_add(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::IndexAdd); }
void CpuKernels::scatter(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::Scatter); }
void CpuKernels::scatter_add(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::ScatterAdd); }
}  // namespace rbee::cpu
