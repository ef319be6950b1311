// A tensor seen around one axis as [outer, n, inner], the view every reduction and indexing op works in; shared by
// the CPU backend (backends/cpu/cpu_reduce.cpp, cpu_index.cpp) and the GPU kernels (backends/gpu/kernels/reduce.cu,
// index.cu), host code only.
#pragma once

#include <cstdint>

#include "rbee/core/shape.h"

namespace rbee::axis {

// outer: product of the sizes before `axis`; n: the size of `axis`; inner: product of the sizes after it.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

inline AxisSplit split_at(const Shape& shape, int axis) {
  AxisSplit s;
  for (int d = 0; d < axis; ++d) s.outer *= shape[d];
  s.n = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) s.inner *= shape[d];
  return s;
}

}  // namespace rbee::axis
