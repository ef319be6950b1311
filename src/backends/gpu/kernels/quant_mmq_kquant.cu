// MMQ instantiations for the 256-element types with one scale per 32 elements (Q4_K, Q5_K, Q8_K).
#include "backends/gpu/kernels/quant_mmq.cuh"

namespace rbee::gpu::quant {

template void launch_mmq_typed<DType::Q4_K>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q5_K>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q8_K>(GpuDevice&, const MmqArgs&);

}  // namespace rbee::gpu::quant
