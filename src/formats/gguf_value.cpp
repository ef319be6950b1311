// gguf::Value accessors: typed, checked reads of one metadata value.
#include <cstring>
#include <limits>

#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"

namespace rbee::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "invalid";
}

namespace {

bool integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16: case ValueType::U32:
    case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}
bool unsigned_type(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool float_type(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

// "array<u32>" for arrays, the plain name otherwise: used in type-mismatch messages.
std::string full_type_name(ValueType type, ValueType array_type) {
  if (type != ValueType::Array) return value_type_name(type);
  return fmt::format("array<{}>", value_type_name(array_type));
}

// An element of an integer array as int64, checking that a U64 element fits.
int64_t checked_int_element(ValueType array_type, int64_t raw, size_t index) {
  if (array_type == ValueType::U64 && raw < 0)
    RBEE_THROW(ErrorCode::InvalidArgument, "gguf value: u64 array element {} = {} does not fit in int64", index,
               (uint64_t)raw);
  return raw;
}

}  // namespace

bool Value::is_integer() const { return integer_type(type_); }
bool Value::is_float() const { return float_type(type_); }

int64_t Value::as_int() const {
  RBEE_CHECK(is_integer(), "gguf value: expected an integer, got {}", full_type_name(type_, array_type_));
  if (!unsigned_type(type_)) return i_;
  RBEE_CHECK(u_ <= (uint64_t)std::numeric_limits<int64_t>::max(), "gguf value: u64 {} does not fit in int64", u_);
  return (int64_t)u_;
}

uint64_t Value::as_uint() const {
  RBEE_CHECK(is_integer(), "gguf value: expected an integer, got {}", full_type_name(type_, array_type_));
  if (unsigned_type(type_)) return u_;
  RBEE_CHECK(i_ >= 0, "gguf value: expected a non-negative integer, got {} {}", value_type_name(type_), i_);
  return (uint64_t)i_;
}

double Value::as_float() const {
  if (is_float()) return f_;
  RBEE_CHECK(is_integer(), "gguf value: expected a number, got {}", full_type_name(type_, array_type_));
  return unsigned_type(type_) ? (double)u_ : (double)i_;
}

bool Value::as_bool() const {
  RBEE_CHECK(type_ == ValueType::Bool, "gguf value: expected bool, got {}", full_type_name(type_, array_type_));
  return i_ != 0;
}

const std::string& Value::as_string() const {
  RBEE_CHECK(type_ == ValueType::String, "gguf value: expected string, got {}", full_type_name(type_, array_type_));
  return s_;
}

size_t Value::array_size() const {
  RBEE_CHECK(type_ == ValueType::Array, "gguf value: expected an array, got {}", full_type_name(type_, array_type_));
  switch (array_type_) {
    case ValueType::String: return strings_.size();
    case ValueType::Array: return values_.size();
    case ValueType::F32: case ValueType::F64: return floats_.size();
    default: return ints_.size();
  }
}

std::vector<std::string> Value::as_string_array() const {
  RBEE_CHECK(type_ == ValueType::Array && array_type_ == ValueType::String,
             "gguf value: expected array<string>, got {}", full_type_name(type_, array_type_));
  return strings_;
}

std::vector<int64_t> Value::as_int_array() const {
  RBEE_CHECK(type_ == ValueType::Array && integer_type(array_type_),
             "gguf value: expected an array of integers, got {}", full_type_name(type_, array_type_));
  if (array_type_ == ValueType::U64) {
    for (size_t i = 0; i < ints_.size(); ++i) checked_int_element(array_type_, ints_[i], i);
  }
  return ints_;
}

std::vector<double> Value::as_float_array() const {
  RBEE_CHECK(type_ == ValueType::Array && (integer_type(array_type_) || float_type(array_type_)),
             "gguf value: expected an array of numbers, got {}", full_type_name(type_, array_type_));
  if (float_type(array_type_)) return floats_;
  std::vector<double> out(ints_.size());
  for (size_t i = 0; i < ints_.size(); ++i)
    out[i] = array_type_ == ValueType::U64 ? (double)(uint64_t)ints_[i] : (double)ints_[i];
  return out;
}

std::vector<Value> Value::as_array() const {
  RBEE_CHECK(type_ == ValueType::Array, "gguf value: expected an array, got {}", full_type_name(type_, array_type_));
  if (array_type_ == ValueType::Array) return values_;
  std::vector<Value> out(array_size());
  for (size_t i = 0; i < out.size(); ++i) {
    Value& e = out[i];
    e.type_ = array_type_;
    if (array_type_ == ValueType::String) {
      e.s_ = strings_[i];
    } else if (float_type(array_type_)) {
      e.f_ = floats_[i];
    } else if (unsigned_type(array_type_)) {
      e.u_ = (uint64_t)ints_[i];
    } else {
      e.i_ = ints_[i];  // signed integers and Bool
    }
  }
  return out;
}

std::string Value::to_string() const {
  switch (type_) {
    case ValueType::String: {
      constexpr size_t kShown = 48;
      if (s_.size() <= kShown) return fmt::format("string \"{}\"", s_);
      return fmt::format("string \"{}...\" ({} bytes)", s_.substr(0, kShown), s_.size());
    }
    case ValueType::Array: return fmt::format("array<{}>[{}]", value_type_name(array_type_), array_size());
    case ValueType::Bool: return fmt::format("bool {}", i_ != 0);
    case ValueType::F32: case ValueType::F64: return fmt::format("{} {}", value_type_name(type_), f_);
    default:
      if (unsigned_type(type_)) return fmt::format("{} {}", value_type_name(type_), u_);
      return fmt::format("{} {}", value_type_name(type_), i_);
  }
}

}  // namespace rbee::gguf
