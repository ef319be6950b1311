// The three steps of one flash-attention key block on the CPU (cpu_attention_blocks.cpp), used by
// cpu_attention.cpp: scores for a tile of query rows against a block of keys, the online-softmax update, and
// the probability-weighted accumulation of values. f32 versions run Highway SIMD (dispatched at run time);
// f64 versions are plain loops. All buffers are row-major with the given row strides (in elements).
#pragma once

#include <cstdint>

namespace rbee::cpu::attn {

// s[r][j] = dot(q[r], k[j]) over `dim` values, for r < rows, j < nk.
void scores(const float* q, int64_t q_stride, int64_t rows, const float* k, int64_t k_stride, int64_t nk,
            int64_t dim, float* s, int64_t s_stride);
void scores(const double* q, int64_t q_stride, int64_t rows, const double* k, int64_t k_stride, int64_t nk,
            int64_t dim, double* s, int64_t s_stride);

// Online-softmax step over one key block. Row r sees keys [lo[r], hi[r]) of the block (0 <= lo <= hi <= nk).
// With softcap > 0 visible scores first become softcap * tanh(s / softcap). Then, with m_new = max(m[r], visible
// scores): s[r][j] becomes exp(s - m_new) for visible j and 0 elsewhere, l[r] = l[r] * alpha + sum_j s[r][j],
// m[r] = m_new, and alpha[r] = exp(m_old - m_new) is what the row's accumulated output must be scaled by
// (1 for a row that sees nothing in this block). Start a row with m = -inf, l = 0.
void softmax_step(float* s, int64_t s_stride, int64_t rows, int64_t nk, const int32_t* lo, const int32_t* hi,
                  float softcap, float* m, float* l, float* alpha);
void softmax_step(double* s, int64_t s_stride, int64_t rows, int64_t nk, const int32_t* lo, const int32_t* hi,
                  double softcap, double* m, double* l, double* alpha);

// o[r] = o[r] * alpha[r] + sum_j p[r][j] * v[j] over `dim_v` values, j < nk.
void accumulate(const float* p, int64_t p_stride, int64_t rows, const float* v, int64_t v_stride, int64_t nk,
                int64_t dim_v, const float* alpha, float* o, int64_t o_stride);
void accumulate(const double* p, int64_t p_stride, int64_t rows, const double* v, int64_t v_stride, int64_t nk,
                int64_t dim_v, const double* alpha, double* o, int64_t o_stride);

}  // namespace rbee::cpu::attn
