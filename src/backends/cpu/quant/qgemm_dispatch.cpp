// Chooses the prompt GEMM (qgemm.h) for this CPU, or none.
#include <cstdlib>
#include <cstring>

#include <hwy/highway.h>

#include "backends/cpu/quant/qgemm.h"
#include "backends/cpu/quant/qgemm_target.h"

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
bool enabled_by_env() {
  const char* v = std::getenv("RBEE_CPU_QGEMM");
  return v == nullptr || std::strcmp(v, "0") != 0;
}
}  // namespace

const QGemm* qgemm_kernel(DType weight) {
  static const bool available = cpu_has_avx512_vnni() && enabled_by_env();
  if (!available) return nullptr;
  // The GEMM reproduces the AVX2 / AVX3 row kernels bit for bit; where Highway runs another target (a test
  // restricting targets), the row kernels compute everything.
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = targets & -targets;
  if (best != HWY_AVX2 && best != HWY_AVX3) return nullptr;
#if RBEE_QGEMM_X86
  return qgemm_avx512_vnni(weight);
#else
  return nullptr;
#endif
}

}  // namespace rbee::cpu::quant
