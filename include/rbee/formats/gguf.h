// GGUF model files (v2 and v3), read through mmap.
//
// File layout (little endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata
// pairs (string key, u32 value type, value), tensor_count tensor infos (string name, u32 n_dims, u64 dims[n]
// innermost first, u32 ggml type, u64 offset into the data section), padding to `general.alignment`
// (default 32), then the data section. Strings are a u64 byte length followed by the bytes (no terminator).
//
// Every count, length, offset and size is checked against the file before anything is allocated; a malformed
// file throws Error(Io) whose message names the source, the byte offset, the key or tensor being read and the
// reason, e.g. "model.gguf: byte 1234: tensor 'blk.0.attn_q.weight': offset 96 is not a multiple of the
// alignment 32". Version 1 files and big-endian files are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rbee/core/dtype.h"
#include "rbee/core/shape.h"
#include "rbee/core/tensor.h"

namespace rbee {
class Device;
}

namespace rbee::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
// "u8", "i32", "string", "array", ... ("invalid" for a value outside the enum).
const char* value_type_name(ValueType t);

// Limits that keep a hostile file from making the reader allocate or recurse without bound.
inline constexpr int kMaxArrayNesting = 8;        // arrays of arrays, deepest level
inline constexpr uint64_t kMaxKeyLength = 65535;  // bytes of a metadata key (the spec's limit)
inline constexpr int kMaxDims = 4;                // dims of one tensor (GGML_MAX_DIMS)

// One metadata value. Arrays keep their element type; nested arrays are arrays of Values.
class Value {
 public:
  ValueType type() const { return type_; }
  ValueType array_type() const { return array_type_; }  // element type when type() == Array

  bool is_integer() const;  // U8..I64 (not Bool)
  bool is_float() const;    // F32, F64
  // Checked accessors: throw InvalidArgument naming the actual type when the value is not of that kind.
  int64_t as_int() const;            // any integer type (U64 above INT64_MAX throws)
  uint64_t as_uint() const;          // any integer type holding a value >= 0
  double as_float() const;           // any integer or float type
  bool as_bool() const;
  const std::string& as_string() const;
  size_t array_size() const;
  std::vector<std::string> as_string_array() const;
  std::vector<int64_t> as_int_array() const;   // arrays of any integer type (U64 above INT64_MAX throws)
  std::vector<double> as_float_array() const;  // arrays of any integer or float type
  // The elements as Values, for arrays of any element type (nested arrays included). Copies for flat arrays.
  std::vector<Value> as_array() const;

  // Short human-readable form ("u32 32000", "string \"llama\"", "array<string>[49152]").
  std::string to_string() const;

 private:
  friend class Parser;
  ValueType type_ = ValueType::U8;
  ValueType array_type_ = ValueType::U8;
  int64_t i_ = 0;   // signed integers and Bool
  uint64_t u_ = 0;  // unsigned integers
  double f_ = 0;    // F32, F64
  std::string s_;
  // Array storage: one of these is used according to array_type_.
  std::vector<std::string> strings_;  // String
  std::vector<int64_t> ints_;         // integer types and Bool; U64 elements are stored bit for bit
  std::vector<double> floats_;        // F32, F64
  std::vector<Value> values_;         // Array (nested arrays)
};

struct TensorInfo {
  std::string name;
  Shape shape;            // row-major (outermost first): GGUF dims reversed
  DType dtype;
  uint64_t offset = 0;    // from the start of the data section
  uint64_t bytes = 0;     // bytes of the tensor's data
};

class File {
 public:
  // Maps and parses the file. Throws Error(NotFound) for a missing file, Error(Io) for a malformed one,
  // Error(OutOfMemory) when its metadata does not fit in memory.
  static File open(const std::string& path);
  // Parses a file already in memory (fuzzing, tests). `bytes` must outlive the File and its tensors.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;  // start of the data section in the file
  uint64_t file_size() const;

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when absent; Error(InvalidArgument) when present with another type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;  // empty when absent
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  // Tensor infos in file order.
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // Raw bytes of a tensor inside the mapping.
  std::span<const uint8_t> tensor_bytes(const TensorInfo& info) const;
  // A CPU tensor viewing the mapped bytes (no copy, read-only memory); it keeps the mapping alive. Throws
  // Error(Io) when the data's address is not aligned for the dtype (possible with general.alignment < 4).
  Tensor tensor(const TensorInfo& info, Device& cpu) const;
  // Same, by name; Error(NotFound) when the file has no such tensor.
  Tensor tensor(std::string_view name, Device& cpu) const;

 private:
  friend class Parser;
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::gguf
