// The time-embedding projections of all of a UNet's resnets as one product (RBEE_SD_TIME_PROJ_FUSED, on by default).
//
// Each resnet projects the step's embedding: t_r = time_emb_proj_r(silu(temb)), temb [N, E] -> [N, W_r] (W_r = its
// channels, twice that for scale-shift resnets). Those are ~20 tiny products a step ([2 x 1280] x [1280 x W_r]),
// each bound by its launch. Here their weights are concatenated once at load, rows grouped by width W, so a step
// runs one silu, one product [N, E] x [E, sum W_r] and one copy per width that regroups the columns
// [N, count, W] -> [count, N, W]; resnet r then reads its contiguous [N, W_r] slice. The numbers are those of the
// separate products up to the summation order the vendor GEMM picks for the wider product (bit-identical on the
// CPU, whose products sum each output alone).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "sd/unet_blocks.h"

namespace rbee::sd {

class FusedTimeProjections {
 public:
  // Concatenates the time projections of `resnets` (the UNet's, in the order its step runs them; those without a
  // time projection are skipped) and releases their separate weights. Returns an undefined object (defined() false,
  // resnets untouched) when the weights cannot be concatenated (other dtypes than F32 / F16 / BF16, mixed dtypes or
  // biases) or no resnet has a time projection.
  static FusedTimeProjections build(std::span<blocks::Resnet* const> resnets);

  bool defined() const { return fused_.w.defined(); }
  // temb [N, E] -> one projection per resnet given to build(), in that order: [N, W_r] contiguous (an undefined
  // tensor for a resnet without a time projection), equal to resnets[r]->time_projection(temb).
  std::vector<Tensor> operator()(const Tensor& temb) const;

 private:
  // Resnets of one projection width: their rows are adjacent in the fused weights, from column `column` on.
  struct Group {
    int64_t width = 0, count = 0, column = 0;
  };
  // Where resnet r's projection is: group and index inside it; group < 0 for a resnet without one.
  struct Slot {
    int group = -1;
    int64_t index = 0;
  };
  nn::Linear fused_;
  std::vector<Group> groups_;
  std::vector<Slot> slots_;
};

}  // namespace rbee::sd
