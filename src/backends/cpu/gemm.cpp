// cpu::gemm entry: argument checks, the trivial sizes, the threading decision and per-thread scratch memory.
// The kernels themselves are in gemm_kernels.cpp (one copy per SIMD target).
#include "backends/cpu/gemm.h"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/gemm_internal.h"
#include "rbee/core/error.h"
#include "rbee/core/thread_pool.h"

namespace rbee::cpu {

namespace gemm_detail {
namespace {

struct ScratchBuffer {
  float* data = nullptr;
  size_t capacity = 0;  // floats
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { release(); }
  void release() {
    std::free(data);
    data = nullptr;
    capacity = 0;
  }
};

thread_local ScratchBuffer t_scratch[(int)Scratch::kCount];

// A workspace bigger than this is returned to the system when the call that needed it ends.
constexpr size_t kKeepScratchFloats = size_t{4} << 20;  // 16 MiB

}  // namespace

float* scratch(Scratch slot, size_t floats) {
  ScratchBuffer& buf = t_scratch[(int)slot];
  if (buf.capacity < floats) {
    buf.release();
    // 64 floats of slack past the end: vector loads of the last packed values never leave the allocation.
    const size_t bytes = (floats + 64) * sizeof(float);
    buf.data = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    RBEE_CHECK_CODE(buf.data != nullptr, ErrorCode::OutOfMemory, "gemm: cannot allocate {} bytes of scratch memory",
                    bytes);
    buf.capacity = floats;
  }
  return buf.data;
}

}  // namespace gemm_detail

namespace {

// Below this many multiply-adds a product runs on the calling thread: waking the pool costs more than it saves.
constexpr double kParallelMinMacs = 64.0 * 64.0 * 64.0;

void check_dtype(const char* what, DType t) {
  RBEE_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16, "gemm: {} must be f32, f16 or bf16, got {}", what,
             dtype_name(t));
}

}  // namespace

void gemm(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, const GemmResult& c,
          const GemmOptions& options) {
  RBEE_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: sizes must be non-negative, got M={} N={} K={}", m, n, k);
  check_dtype("A", a.dtype);
  check_dtype("B", b.dtype);
  check_dtype("C", c.dtype);
  if (m == 0 || n == 0) return;
  RBEE_CHECK(c.data != nullptr, "gemm: C is null for a {}x{} result", m, n);
  if (k == 0) {
    // An empty sum: C = 0, or C unchanged when accumulating.
    if (!options.accumulate) {
      const size_t es = (size_t)dtype_type_size(c.dtype);
      for (int64_t i = 0; i < m; ++i) std::memset(static_cast<char*>(c.data) + i * c.row_stride * (int64_t)es, 0, n * es);
    }
    return;
  }
  RBEE_CHECK(a.data != nullptr && b.data != nullptr, "gemm: A or B is null for M={} N={} K={}", m, n, k);

  gemm_detail::GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a;
  args.b = b;
  args.c = c.data;
  args.c_dtype = c.dtype;
  args.c_rs = c.row_stride;
  args.c_cs = 1;
  args.accumulate = options.accumulate;
  const bool big = (double)m * (double)n * (double)k >= kParallelMinMacs;
  args.threads = options.parallel && big ? ThreadPool::global().size() : 1;
  gemm_detail::dispatch(args);

  gemm_detail::ScratchBuffer& ws = gemm_detail::t_scratch[(int)gemm_detail::Scratch::Workspace];
  if (ws.capacity > gemm_detail::kKeepScratchFloats) ws.release();
}

}  // namespace rbee::cpu
