// Chooses the prompt GEMM (qgemm.h) and the decode matvec (matvec.h) for this CPU, or none.
#include <cstdlib>
#include <cstring>

#include "backends/cpu/quant/qgemm.h"
#include "backends/cpu/quant/qgemm_target.h"
#include "backends/cpu/quant/quant.h"
#include "rbee/core/env.h"

namespace rbee::cpu::quant {
namespace {
bool cpu_has_avx512_vnni() {
#if RBEE_QGEMM_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

}  // namespace

const QGemm* qgemm_kernel(DType weight) {
  static const bool available = cpu_has_avx512_vnni() && env::flag_or("RBEE_CPU_QGEMM", true);
  if (!available || !row_kernels_are_x86_simd()) return nullptr;
#if RBEE_QGEMM_X86
  if (weight == DType::F16 || weight == DType::BF16) {
    return float_row_kernel_is_avx3() ? qgemm_float_avx512(weight) : nullptr;
  }
  return qgemm_avx512_vnni(weight);
#else
  (void)weight;
  return nullptr;
#endif
}

MatVecFn matvec_kernel(DType weight) {
  static const bool available = cpu_has_avx512_vnni() && env::flag_or("RBEE_CPU_MATVEC", true);
  if (!available || !row_kernels_are_x86_simd()) return nullptr;
#if RBEE_QGEMM_X86
  return matvec_avx512_vnni(weight);
#else
  (void)weight;
  return nullptr;
#endif
}

}  // namespace rbee::cpu::quant
