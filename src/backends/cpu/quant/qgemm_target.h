// Whether this build has the x86 AVX-512 VNNI prompt GEMM (qgemm_avx512.cpp) and decode matvec
// (matvec_avx512.cpp): x86-64 with GCC or clang, whose per-function target attributes let them sit beside
// baseline code.
#pragma once

#include "backends/cpu/quant/matvec.h"
#include "rbee/core/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RBEE_QGEMM_X86 1
#else
#define RBEE_QGEMM_X86 0
#endif

namespace rbee::cpu::quant {
struct QGemm;
#if RBEE_QGEMM_X86
// The AVX-512 VNNI kernels for `weight` (nullptr for types without one); call only where the CPU has
// AVX-512 F/BW/VL/DQ and VNNI.
const QGemm* qgemm_avx512_vnni(DType weight);
// The F16 / BF16 GEMM (qgemm_float_avx512.cpp), or nullptr for other types; call only where the CPU has AVX-512
// F/BW/VL/DQ and the float row kernels run Highway's AVX3 target (float_row_kernel_is_avx3, quant.h).
const QGemm* qgemm_float_avx512(DType weight);
// The decode matvec kernels (matvec_avx512.cpp, matvec.h) for `weight`, or nullptr; the same condition.
MatVecFn matvec_avx512_vnni(DType weight);
#endif
}  // namespace rbee::cpu::quant
