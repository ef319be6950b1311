// The resnets' time projections as one product (sd/unet_time_projections.h).
#include "sd/unet_time_projections.h"

#include "rbee/ops.h"

namespace rbee::sd {

FusedTimeProjections FusedTimeProjections::build(std::span<blocks::Resnet* const> resnets) {
  FusedTimeProjections f;
  f.slots_.resize(resnets.size());
  // Groups by width in order of first appearance; each resnet's index inside its group.
  for (size_t r = 0; r < resnets.size(); ++r) {
    if (!resnets[r]->has_time) continue;
    const int64_t width = resnets[r]->time_proj.out;
    size_t g = 0;
    while (g < f.groups_.size() && f.groups_[g].width != width) ++g;
    if (g == f.groups_.size()) f.groups_.push_back(Group{width, 0, 0});
    f.slots_[r] = Slot{(int)g, f.groups_[g].count++};
  }
  if (f.groups_.empty()) return {};
  std::vector<const nn::Linear*> parts;  // rows of the fused weights: group by group, in slot order
  for (size_t g = 0; g < f.groups_.size(); ++g) {
    f.groups_[g].column = g == 0 ? 0 : f.groups_[g - 1].column + f.groups_[g - 1].count * f.groups_[g - 1].width;
    for (size_t r = 0; r < resnets.size(); ++r)
      if (f.slots_[r].group == (int)g) parts.push_back(&resnets[r]->time_proj);
  }
  f.fused_ = nn::Linear::fuse(parts);
  if (!f.fused_.w.defined()) return {};
  for (blocks::Resnet* r : resnets)  // the separate weights are not read any more (in / out stay)
    if (r->has_time) r->time_proj.w = r->time_proj.b = Tensor();
  return f;
}

std::vector<Tensor> FusedTimeProjections::operator()(const Tensor& temb) const {
  const Tensor all = fused_(ops::silu(temb));  // [N, sum of widths]
  const int64_t n = all.dim(0), total = all.dim(1);
  // Per group, [count, N, width]: the group's columns [N, count, width] with the first two axes swapped, one copy.
  std::vector<Tensor> grouped;
  grouped.reserve(groups_.size());
  for (const Group& g : groups_)
    grouped.push_back(all.as_strided({g.count, n, g.width}, {g.width, total, 1}, all.offset() + g.column).contiguous());
  std::vector<Tensor> out(slots_.size());
  for (size_t r = 0; r < slots_.size(); ++r) {
    const Slot& s = slots_[r];
    if (s.group < 0) continue;
    const Group& g = groups_[(size_t)s.group];
    out[r] = grouped[(size_t)s.group].narrow(0, s.index, 1).view({n, g.width});
  }
  return out;
}

}  // namespace rbee::sd
