// MMQ for Q5_K weights (quant_mmq.cuh has the kernel; one translation unit per block type keeps each compile short
// and lets a parallel build spread them).
#include "backends/gpu/kernels/quant_mmq.cuh"

namespace rbee::gpu::quant {

template void launch_mmq_typed<DType::Q5_K>(GpuDevice&, const MmqArgs&);

}  // namespace rbee::gpu::quant
