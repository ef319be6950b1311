// Shared helpers for CPU kernels: dtype dispatch, float conversions and strided row iteration.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "rbee/core/dtype.h"
#include "rbee/core/error.h"
#include "rbee/core/half.h"
#include "rbee/core/tensor.h"
#include "rbee/core/thread_pool.h"

namespace rbee::cpu {

// ---- conversions: f16/bf16 compute in float, everything else in its own type ----
template <class T> inline float to_float(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return v.to_float();
  else return static_cast<float>(v);
}
template <class T> inline T from_float(float v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(v);
  else return static_cast<T>(v);
}
// The type arithmetic on T happens in: float for 16-bit floats, T itself otherwise.
template <class T> using compute_t = std::conditional_t<std::is_same_v<T, f16> || std::is_same_v<T, bf16>, float, T>;
template <class T> inline compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return v.to_float();
  else return v;
}
template <class T> inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(v);
  else return v;
}

// ---- dtype dispatch: calls f(T{}) with the C++ type of `t` ----
template <class F> void visit_float_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F64: return f(double{});
    default: RBEE_THROW(ErrorCode::Unsupported, "expected a floating dtype, got {}", dtype_name(t));
  }
}
template <class F> void visit_plain_dtype(DType t, F&& f) {
  switch (t) {
    case DType::I64: return f(int64_t{});
    case DType::I32: return f(int32_t{});
    case DType::U32: return f(uint32_t{});
    case DType::U8: return f(uint8_t{});
    default: return visit_float_dtype(t, std::forward<F>(f));
  }
}
template <class F> void visit_index_dtype(DType t, F&& f) {
  switch (t) {
    case DType::I64: return f(int64_t{});
    case DType::I32: return f(int32_t{});
    case DType::U32: return f(uint32_t{});
    default: RBEE_THROW(ErrorCode::Unsupported, "expected an index dtype (i64, i32, u32), got {}", dtype_name(t));
  }
}

// ---- strided iteration ----
// Calls row(base, inner, len) once per row of `shape` (all dimensions but the last), in parallel.
// base[k]: element offset of the row's first element in operand k; inner[k]: operand k's last-axis stride.
// Rank-0 shapes are one row of length 1. Rows are given out in chunks of at least `grain` elements.
template <size_t N, class RowFn>
void for_each_row(const Shape& shape, const std::array<Strides, N>& strides, RowFn&& row,
                  int64_t grain_elements = 1 << 14) {
  const int rank = shape.rank();
  const int64_t len = rank == 0 ? 1 : shape[rank - 1];
  const int64_t rows = len == 0 ? 0 : shape.numel() / len;
  if (rows == 0) return;
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = rank == 0 ? 0 : strides[k][rank - 1];
  const int64_t grain_rows = std::max<int64_t>(1, grain_elements / std::max<int64_t>(len, 1));
  auto run_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::array<int64_t, N> base{};
      int64_t rem = r;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < N; ++k) base[k] += i * strides[k][d];
      }
      row(base, inner, len);
    }
  };
  if (rows * len < grain_elements) {
    run_rows(0, rows);
  } else {
    ThreadPool::global().parallel_for(rows, grain_rows, run_rows);
  }
}

}  // namespace rbee::cpu
