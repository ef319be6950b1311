// The element semantics of the indexing ops (index_select, gather, index_add, scatter; op_table.def), written once
// for the CPU backend (backends/cpu/cpu_index.cpp) and the GPU kernels (backends/gpu/kernels/index.cu): ops that only
// move elements copy their bits, and index_add on an integer dtype wraps around like the dtype (no overflow trap,
// no saturation); floats add in the compute type and round once (each backend's load/store); a bad id's error
// names its position the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "rbee/core/dtype.h"
#include "rbee/core/error.h"
#include "rbee/core/host_device.h"
#include "rbee/core/shape.h"

namespace rbee::index_ops {

// Where flat position `flat` of a tensor of `shape` is, as the error of a bad id names it: "7" for 1-D, else the
// coordinates ("[1, 3]").
inline std::string position_string(const Shape& shape, int64_t flat) {
  if (shape.rank() == 1) return std::to_string(flat);
  std::vector<int64_t> idx((size_t)shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    idx[(size_t)d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return Shape(std::span<const int64_t>(idx)).to_string();
}

// Calls f with an unsigned integer of t's element size (uint8_t .. uint64_t); Unsupported for other sizes.
template <class F>
void visit_element_bits(DType t, F&& f) {
  switch (dtype_type_size(t)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: RBEE_THROW(ErrorCode::Unsupported, "indexing is not defined for {}", dtype_name(t));
  }
}

// a + b for an integer dtype T, wrapping around modulo 2^bits.
template <class T>
RBEE_HOST_DEVICE inline T wrapping_add(T a, T b) {
  static_assert(std::is_integral_v<T>, "wrapping_add is the integer case of index_add");
  using U = std::make_unsigned_t<T>;
  return (T)(U)((U)a + (U)b);
}

}  // namespace rbee::index_ops
