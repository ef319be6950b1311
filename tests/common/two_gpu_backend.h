// The GPU backend the multi-device tests split a model over: the last of cuda, rocm that has at least two devices
// (plug-ins loaded here), or nullptr; the tests skip then (the emulator gives two with RBEE_EMU_DEVICES=2).
#pragma once

#include "rbee/backend/device.h"

namespace rbee::test {

inline Backend* two_gpu_backend() {
  Registry& registry = Registry::global();
  registry.load_plugins();
  Backend* gpu = nullptr;
  for (const char* name : {"cuda", "rocm"}) {
    Backend* b = registry.find(name);
    if (b && b->device_count() >= 2) gpu = b;
  }
  return gpu;
}

}  // namespace rbee::test
