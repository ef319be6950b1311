// Test harness shared by the conformance suite and unit tests.
//
// Backends are test parameters by name ("cpu", "cuda", "rocm"): a case whose backend has no device here
// is SKIPPED (never passed), so a machine without a GPU shows the GPU cases as skipped and every backend runs
// the same cases. Inputs are random with fixed seeds and already rounded to their dtype, so references are
// computed in double from exactly the values the kernel sees. Outputs are poisoned before each run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rbee/backend/device.h"
#include "rbee/core/tensor.h"

namespace rbee::test {

// The backend names every conformance suite is instantiated for.
std::vector<std::string> conformance_backends();
// The device to test for a backend name, or nullptr when this machine has none (the case must skip).
Device* device_for_backend(const std::string& backend);
Device& cpu_device();

// Use at the start of a test body: skips the case when the backend has no device.
#define RBEE_REQUIRE_DEVICE(backend, device_var)                                               \
  ::rbee::Device* device_var = ::rbee::test::device_for_backend(backend);                      \
  if (!device_var) GTEST_SKIP() << "no " << (backend) << " device on this machine";

// How an input tensor is laid out in memory (its logical values are the same in every layout).
enum class Layout {
  Contiguous,  // row-major
  Strided,     // every other element of a buffer twice as wide in the last axis
  Transposed,  // stored with the last two axes swapped, viewed back through transpose
};
const char* layout_name(Layout layout);

// n values uniform in [lo, hi), rounded to what `dtype` can hold (integers for integer dtypes).
std::vector<double> random_values(int64_t n, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// The value `v` becomes when stored as `dtype` (round to nearest even for f16/bf16/f32).
double round_to_dtype(double v, DType dtype);

// A tensor on `device` holding `values` (row-major, shape.numel() of them) in the given layout.
Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype, Device& device,
                   Layout layout = Layout::Contiguous);
// The tensor's elements in logical row-major order, read back to the host as doubles.
std::vector<double> to_doubles(const Tensor& t);

// Fills the next `count` blocks that the device's caching allocator will hand out for `bytes`-sized requests
// with 0xFF bytes (NaN for floats, -1 or max for integers), so that an output a kernel fails to write shows up.
void poison_allocations(Device& device, size_t bytes, int count = 4);

struct Tolerance {
  double atol;
  double rtol;
};
// Default tolerance for results stored as `dtype` and computed in f32 (f64 for F64).
Tolerance default_tolerance(DType dtype);

// |got - want| <= atol + rtol * |want| elementwise; NaN matches only NaN, inf only the same inf.
// Reports the number of mismatches and the first few with their flat indices.
::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                     Tolerance tol);

// Row-major flat index helpers for references.
int64_t flat_index(const Shape& shape, std::initializer_list<int64_t> idx);

}  // namespace rbee::test
