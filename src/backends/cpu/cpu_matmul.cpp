// CPU matmul. (Placeholder body until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::matmul(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Matmul); }
}  // namespace rbee::cpu
