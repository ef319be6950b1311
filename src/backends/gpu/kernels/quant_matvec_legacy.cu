// Quantized matvec instantiations for the 32-element block types (split from the K-quants to keep each
// translation unit's compile time down).
#include "backends/gpu/kernels/quant_matvec.cuh"

namespace rbee::gpu::quant {

template void launch_quant_matvec_typed<DType::Q4_0>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q4_1>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q5_0>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q5_1>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q8_0>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q8_1>(GpuDevice&, const QmvArgs&);

}  // namespace rbee::gpu::quant
