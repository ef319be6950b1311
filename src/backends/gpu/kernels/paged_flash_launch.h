// The tile configurations of the tensor-core paged attention (paged_flash.cuh) and their launchers, one
// translation unit per cache type (paged_flash_f16.cu, paged_flash_bf16.cu) so the two compile in parallel.
#pragma once

#include "backends/gpu/gpu_device.h"

namespace rbee::gpu {

struct FlashParams;

// Configurations (FlashCfg<D, WR, WK, MT, BN> in paged_flash.cuh), by preference:
//   kPrefillWide   4 warps x 32 rows (128 rows), BN 32   head sizes 64, 128
//   kPrefill       4 warps x 16 rows (64 rows),  BN 32   64, 128, 256
//   kDecodeWide    16 rows, 4 warps x 16 keys of BN 64   64, 128
//   kDecode        16 rows, 2 warps x 16 keys of BN 32   64, 128, 256
enum class FlashConfig { kPrefillWide, kPrefill, kDecodeWide, kDecode };

struct FlashShape {
  int rows;        // query rows per block
  int bn;          // keys per staged tile
  int warps;
  int smem_bytes;  // dynamic shared memory
};
// The shape of (config, head size); rows == 0 when that pair is not compiled.
FlashShape flash_shape(FlashConfig config, int d);

// Launch paged_flash_kernel for (config, head size) with the cache's element type on dev's stream (opting in to
// the configuration's shared memory first when it exceeds 48 KiB).
void launch_paged_flash_f16(GpuDevice& dev, FlashConfig config, int d, const FlashParams& p, unsigned grid_x,
                            unsigned grid_y, unsigned grid_z);
void launch_paged_flash_bf16(GpuDevice& dev, FlashConfig config, int d, const FlashParams& p, unsigned grid_x,
                             unsigned grid_y, unsigned grid_z);

}  // namespace rbee::gpu
