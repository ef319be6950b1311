// Unit tests of the internal cpu::gemm API (used by matmul, convolution and attention): every SIMD target this
// CPU runs, every kernel path (decode dot/axpy forms, their transposed versions, packed tiles), mixed operand
// dtypes, odd and broadcast strides, accumulation, 16-bit results, and bitwise agreement of serial and threaded
// runs. References are naive double-precision loops over exactly the values stored.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/gemm_internal.h"
#include "rbee/core/error.h"
#include "rbee/core/half.h"

namespace rbee::cpu {
namespace {

enum class Storage { RowMajor, ColMajor, Strided, BroadcastRows };

// A matrix stored in a buffer of `dtype` elements with some strides; every byte outside the matrix is NaN.
struct Matrix {
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  DType dtype = DType::F32;
  std::vector<unsigned char> bytes;
  std::vector<double> values;  // logical row-major values (exactly what is stored)

  int es() const { return dtype_type_size(dtype); }
  void* at(int64_t i, int64_t j) { return bytes.data() + (i * rs + j * cs) * es(); }
};

double stored_value(double v, DType dtype) {
  if (dtype == DType::F16) return f16((float)v).to_float();
  if (dtype == DType::BF16) return bf16((float)v).to_float();
  return (float)v;
}

void store(double v, DType dtype, void* dst) {
  if (dtype == DType::F32) {
    const float f = (float)v;
    std::memcpy(dst, &f, 4);
  } else {
    const uint16_t b = dtype == DType::F16 ? f32_to_f16_bits((float)v) : f32_to_bf16_bits((float)v);
    std::memcpy(dst, &b, 2);
  }
}

double load(DType dtype, const void* src) {
  if (dtype == DType::F32) {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  return dtype == DType::F16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

Matrix make_matrix(int64_t rows, int64_t cols, DType dtype, Storage storage, uint64_t seed) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = dtype;
  int64_t elements = 0;
  switch (storage) {
    case Storage::RowMajor: m.rs = cols, m.cs = 1, elements = rows * cols; break;
    case Storage::ColMajor: m.rs = 1, m.cs = rows, elements = rows * cols; break;
    case Storage::Strided: m.rs = 2 * cols + 3, m.cs = 2, elements = rows * m.rs; break;
    case Storage::BroadcastRows: m.rs = 0, m.cs = 1, elements = cols; break;
  }
  m.bytes.assign((size_t)(elements * m.es()), 0xFF);  // NaN in every dtype
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> row_values((size_t)cols);
  m.values.resize((size_t)(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if (storage != Storage::BroadcastRows || i == 0) row_values[j] = stored_value(dist(rng), dtype);
      m.values[(size_t)(i * cols + j)] = row_values[j];
      store(row_values[j], dtype, m.at(i, j));
    }
  }
  return m;
}

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::RowMajor: return "row";
    case Storage::ColMajor: return "col";
    case Storage::Strided: return "strided";
    case Storage::BroadcastRows: return "bcast";
  }
  return "?";
}

struct Case {
  int64_t m, n, k;
  Storage a_storage, b_storage;
  DType a_dtype, b_dtype, c_dtype;
  bool accumulate;
};

std::string describe(const Case& c) {
  return fmt::format("M={} N={} K={} A {} storage {} B {} storage {} C {} accumulate {}", c.m, c.n, c.k,
                     dtype_name(c.a_dtype), storage_name(c.a_storage), dtype_name(c.b_dtype), storage_name(c.b_storage),
                     dtype_name(c.c_dtype), c.accumulate);
}

// Runs one case (serially and threaded) and compares with the double reference; C's padding must stay NaN.
void check_case(const Case& tc, uint64_t seed) {
  SCOPED_TRACE(describe(tc));
  Matrix a = make_matrix(tc.m, tc.k, tc.a_dtype, tc.a_storage, seed);
  Matrix b = make_matrix(tc.k, tc.n, tc.b_dtype, tc.b_storage, seed + 1);
  // C [m, n] with row stride n + 3; initial values (read when accumulating) or NaN.
  const int64_t ldc = tc.n + 3;
  const int ces = dtype_type_size(tc.c_dtype);
  std::vector<unsigned char> c0((size_t)(tc.m * ldc * ces), 0xFF);
  std::vector<double> init((size_t)(tc.m * tc.n), 0.0);
  if (tc.accumulate) {
    std::mt19937_64 rng(seed + 2);
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    for (int64_t i = 0; i < tc.m; ++i) {
      for (int64_t j = 0; j < tc.n; ++j) {
        init[i * tc.n + j] = stored_value(dist(rng), tc.c_dtype);
        store(init[i * tc.n + j], tc.c_dtype, c0.data() + (i * ldc + j) * ces);
      }
    }
  }
  std::vector<unsigned char> serial = c0, threaded = c0;
  const GemmOperand ga{a.bytes.data(), a.dtype, a.rs, a.cs};
  const GemmOperand gb{b.bytes.data(), b.dtype, b.rs, b.cs};
  gemm(tc.m, tc.n, tc.k, ga, gb, {serial.data(), tc.c_dtype, ldc}, {.accumulate = tc.accumulate, .parallel = false});
  gemm(tc.m, tc.n, tc.k, ga, gb, {threaded.data(), tc.c_dtype, ldc}, {.accumulate = tc.accumulate, .parallel = true});
  EXPECT_EQ(serial, threaded) << "serial and threaded results differ";

  const double tol_abs = 4e-6 * std::sqrt((double)tc.k + 1) * (tc.accumulate ? 2 : 1);
  const double tol_rel = tc.c_dtype == DType::F32 ? 1e-5 : tc.c_dtype == DType::F16 ? 2e-3 : 1.6e-2;
  int bad = 0;
  for (int64_t i = 0; i < tc.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const unsigned char* got_ptr = serial.data() + (i * ldc + j) * ces;
      if (j >= tc.n) {
        // padding between rows: never written
        if (std::memcmp(got_ptr, c0.data() + (i * ldc + j) * ces, ces) != 0 && bad++ < 5) {
          ADD_FAILURE() << "padding C[" << i << ", " << j << "] was written";
        }
        continue;
      }
      double want = init[i * tc.n + j];
      for (int64_t p = 0; p < tc.k; ++p) want += a.values[i * tc.k + p] * b.values[p * tc.n + j];
      const double got = load(tc.c_dtype, got_ptr);
      if (!(std::fabs(got - want) <= tol_abs + tol_rel * std::fabs(want)) && bad++ < 5) {
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", want " << want;
      }
    }
  }
}

// Shapes that reach each path: M <= 8 (decode forms), N <= 8 (transposed decode forms), packed with edge tiles,
// several K blocks (K > 512) and a second N block.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const DType f32 = DType::F32, f16 = DType::F16, bf16 = DType::BF16;
  const Storage kStorages[] = {Storage::RowMajor, Storage::ColMajor, Storage::Strided, Storage::BroadcastRows};
  struct Size {
    int64_t m, n, k;
  };
  const Size sizes[] = {{1, 37, 29}, {5, 70, 300}, {8, 9, 17}, {40, 3, 45}, {13, 1, 64},
                        {31, 45, 600}, {100, 70, 33}, {20, 4150, 6}};
  for (const Size& s : sizes) {
    for (Storage sa : kStorages) {
      for (Storage sb : kStorages) {
        cases.push_back({s.m, s.n, s.k, sa, sb, f32, f32, f32, false});
      }
    }
    // dtypes: mixed inputs, 16-bit outputs, accumulation
    cases.push_back({s.m, s.n, s.k, Storage::RowMajor, Storage::ColMajor, f16, f16, f16, false});
    cases.push_back({s.m, s.n, s.k, Storage::ColMajor, Storage::RowMajor, bf16, bf16, bf16, true});
    cases.push_back({s.m, s.n, s.k, Storage::Strided, Storage::RowMajor, f16, bf16, f32, true});
    cases.push_back({s.m, s.n, s.k, Storage::RowMajor, Storage::Strided, f32, f16, bf16, false});
    cases.push_back({s.m, s.n, s.k, Storage::RowMajor, Storage::RowMajor, f32, f32, f32, true});
    cases.push_back({s.m, s.n, s.k, Storage::ColMajor, Storage::ColMajor, bf16, f32, f16, true});
  }
  return cases;
}

class GemmTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { gemm_detail::force_target_for_testing(GetParam()); }
  void TearDown() override { gemm_detail::force_target_for_testing(0); }
};

TEST_P(GemmTargets, MatchesDoubleReferenceOnEveryPath) {
  const std::string forced = hwy::TargetName(GetParam());
  EXPECT_EQ(std::string(gemm_target_name()), forced);
  uint64_t seed = 1;
  for (const Case& c : all_cases()) check_case(c, seed += 10);
}

INSTANTIATE_TEST_SUITE_P(Cpu, GemmTargets, ::testing::ValuesIn(gemm_detail::runnable_targets()),
                         [](const auto& info) { return std::string(hwy::TargetName(info.param)); });

TEST(Gemm, EmptyInnerDimensionZeroesOrKeepsC) {
  std::vector<float> c(6, 5.0f);
  const float dummy = 1.0f;
  gemm_f32(2, 3, 0, &dummy, 0, 1, &dummy, 3, 1, c.data(), 3);
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  std::vector<float> d(6, 5.0f);
  gemm_f32(2, 3, 0, &dummy, 0, 1, &dummy, 3, 1, d.data(), 3, {.accumulate = true});
  EXPECT_EQ(d, std::vector<float>(6, 5.0f));
  // no rows or no columns: nothing to do, nothing read
  gemm_f32(0, 3, 4, nullptr, 4, 1, nullptr, 3, 1, nullptr, 3);
}

TEST(Gemm, RejectsBadArguments) {
  float x[16] = {};
  EXPECT_THROW(gemm_f32(-1, 2, 2, x, 2, 1, x, 2, 1, x, 2), Error);
  EXPECT_THROW(gemm_f32(2, 2, 2, nullptr, 2, 1, x, 2, 1, x, 2), Error);
  EXPECT_THROW(gemm_f32(2, 2, 2, x, 2, 1, x, 2, 1, nullptr, 2), Error);
  try {
    gemm(2, 2, 2, {x, DType::F64, 2, 1}, {x, DType::F32, 2, 1}, {x, DType::F32, 2});
    FAIL() << "f64 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rbee::cpu
