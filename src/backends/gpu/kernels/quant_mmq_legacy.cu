// MMQ instantiations for the 32-element block types (one translation unit per type family keeps compile times
// down; quant_mmq.cuh has the kernel).
#include "backends/gpu/kernels/quant_mmq.cuh"

namespace rbee::gpu::quant {

template void launch_mmq_typed<DType::Q4_0>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q4_1>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q5_0>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q5_1>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q8_0>(GpuDevice&, const MmqArgs&);
template void launch_mmq_typed<DType::Q8_1>(GpuDevice&, const MmqArgs&);

}  // namespace rbee::gpu::quant
