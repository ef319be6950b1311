// The tiny SD 1.5 pipeline of the SD tests (tests/data/tiny_sd/sd15_l4, its fp16 variant), loaded once per test
// process and shared by the tests that compare it with diffusers.
#pragma once

#include "rbee/sd/pipeline.h"
#include "sd_test_util.h"

namespace rbee::sd::test {

inline const Pipeline& tiny_l4_pipeline() {
  static Pipeline p = [] {
    LoadOptions o;
    o.variant = "fp16";
    return Pipeline::load(tiny_sd("sd15_l4"), o);
  }();
  return p;
}

}  // namespace rbee::sd::test
