// Highway row kernels behind the CPU reduce and softmax ops (simd_reduce.cpp). Each call dispatches once to the
// best SIMD target of this CPU and then runs `rows` rows of `n` contiguous elements (row r starts at r * n).
#pragma once

#include <cstdint>

namespace rbee::cpu {

// out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)); the sum is gathered in double. A row that holds a
// NaN or +inf, or only -inf entries, becomes all NaN (what the exact formula gives). out may equal x.
void softmax_rows(const float* x, float* out, int64_t rows, int64_t n);
void softmax_rows(const double* x, double* out, int64_t rows, int64_t n);

// out[r] = sum of x[r, :], accumulated in double and rounded once to the element type.
void sum_rows(const float* x, int64_t rows, int64_t n, float* out);
void sum_rows(const double* x, int64_t rows, int64_t n, double* out);

// acc[c] += x[r * stride + c] for r < rows, c < len: adds rows of a column block into double accumulators (the
// sum of a non-last axis). Each element is widened exactly before it is added.
void add_rows(const float* x, int64_t rows, int64_t stride, int64_t len, double* acc);
void add_rows(const double* x, int64_t rows, int64_t stride, int64_t len, double* acc);

}  // namespace rbee::cpu
