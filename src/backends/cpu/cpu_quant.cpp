// CPU quantization and quantized matmul. (Placeholder bodies until the op family lands.)
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {
void CpuKernels::quantize(const Tensor&, Tensor&) { unsupported(OpKind::Quantize); }
void CpuKernels::dequantize(const Tensor&, Tensor&) { unsupported(OpKind::Dequantize); }
void CpuKernels::qmatmul(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::QMatmul); }
}  // namespace rbee::cpu
