// The tensor-core paged attention kernels for BF16 caches (paged_flash.cuh, launched from paged_flash.cu).
#include "backends/gpu/kernels/paged_flash_configs.cuh"

namespace rbee::gpu {

void launch_paged_flash_bf16(GpuDevice& dev, FlashConfig config, int d, const FlashParams& p, unsigned grid_x,
                              unsigned grid_y, unsigned grid_z) {
  launch_flash<MmaElem::BF16>(dev, config, d, p, dim3(grid_x, grid_y, grid_z));
}

}  // namespace rbee::gpu
