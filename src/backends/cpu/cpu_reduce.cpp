// CPU reductions, softmax and argsort. (Placeholder bodies until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::reduce(ReduceOp, const Tensor&, int, Tensor&) { unsupported(OpKind::Reduce); }
void CpuKernels::softmax(const Tensor&, Tensor&) { unsupported(OpKind::Softmax); }
void CpuKernels::argsort(const Tensor&, bool, Tensor&) { unsupported(OpKind::Argsort); }
}  // namespace rbee::cpu
