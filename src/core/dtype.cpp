#include "rbee/core/dtype.h"

#include "rbee/core/error.h"

namespace rbee {

namespace {
// Block sizes and bytes per block follow ggml's definitions (QK4_0 = 32, QK_K = 256, ...).
constexpr DTypeInfo kInfos[kDTypeCount] = {
    {DType::F32, "f32", 1, 4, false, true, true, 0},
    {DType::F16, "f16", 1, 2, false, true, true, 1},
    {DType::BF16, "bf16", 1, 2, false, true, true, 30},
    {DType::F64, "f64", 1, 8, false, true, true, 28},
    {DType::I64, "i64", 1, 8, false, false, true, 27},
    {DType::I32, "i32", 1, 4, false, false, true, 26},
    {DType::U32, "u32", 1, 4, false, false, false, -1},
    {DType::U8, "u8", 1, 1, false, false, false, -1},
    {DType::Q4_0, "q4_0", 32, 2 + 16, true, false, true, 2},
    {DType::Q4_1, "q4_1", 32, 2 + 2 + 16, true, false, true, 3},
    {DType::Q5_0, "q5_0", 32, 2 + 4 + 16, true, false, true, 6},
    {DType::Q5_1, "q5_1", 32, 2 + 2 + 4 + 16, true, false, true, 7},
    {DType::Q8_0, "q8_0", 32, 2 + 32, true, false, true, 8},
    {DType::Q8_1, "q8_1", 32, 2 + 2 + 32, true, false, true, 9},
    {DType::Q2_K, "q2_k", 256, 16 + 64 + 2 + 2, true, false, true, 10},
    {DType::Q3_K, "q3_k", 256, 32 + 64 + 12 + 2, true, false, true, 11},
    {DType::Q4_K, "q4_k", 256, 2 + 2 + 12 + 128, true, false, true, 12},
    {DType::Q5_K, "q5_k", 256, 2 + 2 + 12 + 32 + 128, true, false, true, 13},
    {DType::Q6_K, "q6_k", 256, 128 + 64 + 16 + 2, true, false, true, 14},
    {DType::Q8_K, "q8_k", 256, 4 + 256 + 2 * 16, true, false, true, 15},
};
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  const int i = (int)t;
  RBEE_ASSERT(i >= 0 && i < kDTypeCount, "bad dtype value {}", i);
  return kInfos[i];
}

int64_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  RBEE_CHECK(n % info.block_size == 0, "{} elements of {} is not a whole number of {}-element blocks", n, info.name,
             info.block_size);
  return n / info.block_size * info.type_size;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kInfos) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  for (const auto& info : kInfos) {
    if (info.ggml_type >= 0 && (uint32_t)info.ggml_type == ggml_type) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace rbee
