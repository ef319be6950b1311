// How many blocks share the K steps of one output tile (split-K), for the tiled products that sum their splits in
// the kernel (MMQ, quant_mmq.cuh; the skinny 16-bit product, gemm_skinny.cu). Host code.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rbee::gpu {

// The time model, in units of one K step of one block:
//   prologue   steps of a block that nothing overlaps (its first loads);
//   split_sum  the sum of the partial tiles, per split, added once K is split at all;
//   min_steps  the fewest steps a split may get once K is split (a shorter one never fills its pipeline).
struct SplitKCost {
  int64_t prologue = 1;
  int64_t split_sum = 0;
  int64_t min_steps = 1;
};

// Splits of K for `tiles` output tiles of `steps` K steps each on `slots` resident blocks. Only a grid that leaves
// slots empty is split. A choice s costs ceil(tiles * s / slots) waves x (ceil(steps / s) + prologue), plus s x
// split_sum when s > 1; the fewest splits of the least cost win (e.g. 64 tiles on 264 slots with prologue 1: 4 splits
// in one wave, not 5 in two), at most max_splits, and s only where s - 1 splits would not cover K with the same steps
// per split.
inline int64_t split_k_choice(int64_t tiles, int64_t steps, int64_t slots, int64_t max_splits, const SplitKCost& c) {
  if (tiles >= slots) return 1;
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= std::min(max_splits, steps); ++s) {
    const int64_t per = (steps + s - 1) / s;
    if ((steps + per - 1) / per != s) continue;  // s - 1 splits would cover K with the same steps per split
    if (s > 1 && per < c.min_steps) break;       // steps per split only shrink from here
    const int64_t cost = (tiles * s + slots - 1) / slots * (per + c.prologue) + (s > 1 ? s * c.split_sum : 0);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

}  // namespace rbee::gpu
