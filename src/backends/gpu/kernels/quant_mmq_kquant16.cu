// MMQ instantiations for the 256-element types with one scale per 16 elements (Q2_K, Q3_K, Q6_K: two k16 tile
// products per 32 elements).
#include "backends/gpu/kernels/quant_mmq.cuh"

namespace rbee::gpu::quant {

template void launch_mmq_typed<DType::Q2_K>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q3_K>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q6_K>(GpuDevice&, const MmqArgs&);

}  // namespace rbee::gpu::quant
