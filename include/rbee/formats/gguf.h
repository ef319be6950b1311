// GGUF model files (v2 and v3), read through mmap.
//
// File layout (little endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata
// pairs (string key, u32 value type, value), tensor_count tensor infos (string name, u32 n_dims, u64 dims[n]
// innermost first, u32 ggml type, u64 offset into the data section), padding to `general.alignment`
// (default 32), then the data section. Every count, length, offset and size is checked against the file; a
// malformed file throws Error(Io) whose message names the byte offset and the reason.
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
const char* value_type_name(ValueType t);

// One metadata value. Arrays keep their element type; nested arrays are arrays of Values.
class Value {
 public:
  ValueType type() const { return type_; }
  ValueType array_type() const { return array_type_; }  // element type when type() == Array

  bool is_integer() const;  // U8..I64 (not Bool)
  bool is_float() const;    // F32, F64
  // Checked accessors: throw InvalidArgument naming the actual type when the value is not of that kind.
  int64_t as_int() const;            // any integer type (U64 above INT64_MAX throws)
  double as_float() const;           // any integer or float type
  bool as_bool() const;
  const std::string& as_string() const;
  size_t array_size() const;
  std::vector<std::string> as_string_array() const;
  std::vector<int64_t> as_int_array() const;
  std::vector<double> as_float_array() const;
  const std::vector<Value>& as_array() const;  // nested arrays and arrays of any type, element by element

  // Short human-readable form ("u32 32000", "array<string>[49152]").
  std::string to_string() const;

 private:
  friend class Parser;
  ValueType type_ = ValueType::U8;
  ValueType array_type_ = ValueType::U8;
  int64_t i_ = 0;
  uint64_t u_ = 0;
  double f_ = 0;
  std::string s_;
  // Array storage: one of these is used according to array_type_.
  std::vector<std::string> strings_;
  std::vector<int64_t> ints_;
  std::vector<double> floats_;
  mutable std::vector<Value> values_;  // nested arrays (and lazily, other arrays element by element)
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
  // Maps and parses the file. Throws Error(NotFound) for a missing file, Error(Io) for a malformed one.
  static File open(const std::string& path);
  // Parses a file already in memory (fuzzing, tests). `bytes` must outlive the File.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;  // start of the data section in the file

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

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // Raw bytes of a tensor inside the mapping.
  std::span<const uint8_t> tensor_bytes(const TensorInfo& info) const;
  // A CPU tensor viewing the mapped bytes (no copy); it keeps the mapping alive.
  Tensor tensor(const TensorInfo& info, Device& cpu) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace rbee::gguf
