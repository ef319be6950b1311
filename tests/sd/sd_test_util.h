// Helpers of the SD tests: golden files under tests/data/sd and tests/data/tiny_sd, tensor comparison.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/harness.h"
#include "rbee/core/tensor.h"
#include "rbee/formats/safetensors.h"

namespace rbee::sd::test {

inline std::string sd_data(const std::string& rel) { return std::string(RBEE_SOURCE_DIR) + "/tests/data/sd/" + rel; }
inline std::string tiny_sd(const std::string& rel) {
  return std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_sd/" + rel;
}

// Largest |a - b| and largest |b| over two tensors of one shape (any dtype, read as doubles).
struct Diff {
  double max_abs = 0, max_ref = 0;
};
inline Diff max_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape()) << got.to_string() << " vs " << want.to_string();
  Diff d;
  if (!(got.shape() == want.shape())) {
    d.max_abs = INFINITY;
    return d;
  }
  std::vector<double> g = rbee::test::to_doubles(got), w = rbee::test::to_doubles(want);
  for (size_t i = 0; i < g.size(); ++i) {
    double e = std::fabs(g[i] - w[i]);
    if (std::isnan(e)) e = INFINITY;
    d.max_abs = std::max(d.max_abs, e);
    d.max_ref = std::max(d.max_ref, std::fabs(w[i]));
  }
  return d;
}

// Expects max |got - want| <= atol + rtol * max |want|.
#define RBEE_EXPECT_TENSOR_NEAR(got, want, atol, rtol)                                                   \
  do {                                                                                                   \
    ::rbee::sd::test::Diff d_ = ::rbee::sd::test::max_diff((got), (want));                             \
    EXPECT_LE(d_.max_abs, (atol) + (rtol) * d_.max_ref) << "max |ref| " << d_.max_ref;                 \
  } while (0)

}  // namespace rbee::sd::test
