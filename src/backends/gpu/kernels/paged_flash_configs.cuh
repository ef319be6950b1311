// Launch glue of the tensor-core paged attention, included by paged_flash_{f16,bf16}.cu and paged_flash.cu.
#pragma once

#include "backends/gpu/kernels/paged_flash.cuh"
#include "backends/gpu/kernels/paged_flash_launch.h"

namespace rbee::gpu {
namespace {

template <int D>
using PrefillWideCfg = FlashCfg<D, 4, 1, 2, 32>;
template <int D>
using PrefillCfg = FlashCfg<D, 4, 1, 1, 32>;
template <int D>
using DecodeWideCfg = FlashCfg<D, 1, 4, 1, 64>;
template <int D>
using DecodeCfg = FlashCfg<D, 1, 2, 1, 32>;

// Calls f(Cfg{}) for (config, d), or returns false for pairs that are not compiled (registers: a head size of
// 256 takes only the 16-row-per-warp shapes).
template <class F>
bool visit_flash_config(FlashConfig config, int d, F&& f) {
  auto by_d = [&](auto wide_tag, auto narrow_tag, bool wide) -> bool {
    using Wide = decltype(wide_tag);
    using Narrow = decltype(narrow_tag);
    if (wide) {
      if constexpr (Wide::D == 256) return false;
      else f(Wide{});
    } else {
      f(Narrow{});
    }
    return true;
  };
  const bool prefill = config == FlashConfig::kPrefillWide || config == FlashConfig::kPrefill;
  const bool wide = config == FlashConfig::kPrefillWide || config == FlashConfig::kDecodeWide;
  switch (d) {
    case 64:
      return prefill ? by_d(PrefillWideCfg<64>{}, PrefillCfg<64>{}, wide)
                     : by_d(DecodeWideCfg<64>{}, DecodeCfg<64>{}, wide);
    case 128:
      return prefill ? by_d(PrefillWideCfg<128>{}, PrefillCfg<128>{}, wide)
                     : by_d(DecodeWideCfg<128>{}, DecodeCfg<128>{}, wide);
    case 256:
      return prefill ? by_d(FlashCfg<256, 4, 1, 2, 32>{}, PrefillCfg<256>{}, wide)
                     : by_d(FlashCfg<256, 1, 4, 1, 64>{}, DecodeCfg<256>{}, wide);
    default:
      return false;
  }
}

template <MmaElem E>
void launch_flash(GpuDevice& dev, FlashConfig config, int d, const FlashParams& p, dim3 grid) {
  const bool ok = visit_flash_config(config, d, [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    launch_flash_kernel<paged_flash_kernel<Cfg, E>>(dev, grid, (unsigned)(Cfg::kWarps * dev.props().warp_size),
                                                    Cfg::kSmemBytes, p);
  });
  RBEE_CHECK_CODE(ok, ErrorCode::Internal, "paged_attention: flash configuration {} for head size {} not compiled",
                  (int)config, d);
}

}  // namespace
}  // namespace rbee::gpu
