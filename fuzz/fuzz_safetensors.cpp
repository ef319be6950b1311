// libFuzzer target: parses arbitrary bytes as a safetensors file and reads every parsed entry and tensor.
// Any rbee::Error is the expected outcome for bad input; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/formats/safetensors.h"

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const rbee::safetensors::File f = rbee::safetensors::File::parse({data, size}, "fuzz");
    for (const auto& [key, value] : f.metadata()) g_sink = g_sink + key.size() + value.size();
    rbee::Device& cpu = rbee::Registry::global().cpu();
    for (const auto& info : f.tensors()) {
      if (f.find_tensor(info.name) != &info) __builtin_trap();
      if (info.shape.numel() * rbee::dtype_type_size(info.dtype) != (int64_t)info.bytes) __builtin_trap();
      g_sink = g_sink + info.file_dtype.size();
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
