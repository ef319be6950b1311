// Element types: plain numeric types and the GGUF/ggml block-quantized types.
//
// A quantized type stores `block_size` consecutive elements of a row in `type_size` bytes. Tensors of a
// quantized type are laid out row by row; a row's length is a multiple of block_size.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace rbee {

enum class DType : uint8_t {
  F32, F16, BF16, F64, I64, I32, U32, U8,
  // GGUF block types (bit layouts as ggml defines them; see src/backends/cpu/quant/*.h)
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
  Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
};
inline constexpr int kDTypeCount = (int)DType::Q8_K + 1;

struct DTypeInfo {
  DType dtype;
  const char* name;     // lower-case, as printed: "f32", "q4_k"
  int block_size;       // elements per block (1 for plain types)
  int type_size;        // bytes per block
  bool quantized;
  bool floating;        // plain floating types
  bool is_signed;       // signed integer or floating
  int ggml_type;        // GGML/GGUF tensor type id, -1 where GGUF has none
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline int dtype_block_size(DType t) { return dtype_info(t).block_size; }
inline int dtype_type_size(DType t) { return dtype_info(t).type_size; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }
inline bool is_floating(DType t) { return dtype_info(t).floating; }
inline bool is_integer(DType t) { return !dtype_info(t).quantized && !dtype_info(t).floating; }

// Bytes taken by `n` consecutive elements of one row. n must be a multiple of the block size.
int64_t dtype_row_bytes(DType t, int64_t n);

std::optional<DType> dtype_from_name(std::string_view name);
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);

// Maps a C++ element type to its DType (plain types only).
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::U32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
struct f16;
struct bf16;
template <> struct dtype_of<f16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::BF16; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace rbee
