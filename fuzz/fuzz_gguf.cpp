// libFuzzer target: parses arbitrary bytes as a GGUF file and reads every parsed value and tensor.
// Any rbee::Error is the expected outcome for bad input; anything else (a crash, a sanitizer report, another
// exception type, a leak, a hang) is a bug.
#include <cstddef>
#include <cstdint>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"

namespace {

volatile uint64_t g_sink = 0;

void touch(const rbee::gguf::Value& v) {
  using rbee::gguf::ValueType;
  g_sink = g_sink + v.to_string().size();
  try {
    switch (v.type()) {
      case ValueType::String: g_sink = g_sink + v.as_string().size(); break;
      case ValueType::Bool: g_sink = g_sink + v.as_bool(); break;
      case ValueType::F32: case ValueType::F64: g_sink = g_sink + (uint64_t)(v.as_float() != 0); break;
      case ValueType::Array: {
        g_sink = g_sink + v.array_size();
        const ValueType et = v.array_type();
        if (et == ValueType::String) g_sink = g_sink + v.as_string_array().size();
        if (et == ValueType::F32 || et == ValueType::F64) g_sink = g_sink + v.as_float_array().size();
        if (v.as_array().size() != v.array_size()) __builtin_trap();
        for (const auto& e : v.as_array()) touch(e);
        if (et != ValueType::String && et != ValueType::Array && et != ValueType::Bool && et != ValueType::F32 &&
            et != ValueType::F64) {
          g_sink = g_sink + v.as_float_array().size();
          g_sink = g_sink + v.as_int_array().size();  // throws for u64 elements above INT64_MAX
        }
        break;
      }
      default:
        g_sink = g_sink + (uint64_t)(v.as_float() < 0);
        g_sink = g_sink + v.as_uint();  // throws for negative values
        g_sink = g_sink + (uint64_t)v.as_int();  // throws for u64 above INT64_MAX
        break;
    }
  } catch (const rbee::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const rbee::gguf::File f = rbee::gguf::File::parse({data, size}, "fuzz");
    for (const auto& [key, value] : f.metadata()) {
      if (f.find(key) != &value) __builtin_trap();
      touch(value);
    }
    rbee::Device& cpu = rbee::Registry::global().cpu();
    for (const auto& info : f.tensors()) {
      if (f.find_tensor(info.name) != &info) __builtin_trap();
      const auto bytes = f.tensor_bytes(info);
      if (bytes.size() != info.bytes) __builtin_trap();
      if (!bytes.empty()) g_sink = g_sink + bytes.front() + bytes.back();
      try {
        const rbee::Tensor t = f.tensor(info, cpu);
        if ((uint64_t)t.nbytes() != info.bytes) __builtin_trap();
      } catch (const rbee::Error&) {  // data not aligned for its dtype in memory
      }
    }
  } catch (const rbee::Error&) {
  }
  return 0;
}
