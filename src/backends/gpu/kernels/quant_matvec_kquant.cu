// Quantized matvec instantiations for the 256-element super-block types (K-quants and Q8_K).
#include "backends/gpu/kernels/quant_matvec.cuh"

namespace rbee::gpu::quant {

template void launch_quant_matvec_typed<DType::Q2_K>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q3_K>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q4_K>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q5_K>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q6_K>(GpuDevice&, const QmvArgs&);
template void launch_quant_matvec_typed<DType::Q8_K>(GpuDevice&, const QmvArgs&);

}  // namespace rbee::gpu::quant
