// CPU quantization and quantized matmul: drives the row kernels of backends/cpu/quant/ over tensors and threads.
//
// qmatmul: out[M, N] = x[M, K] . w[N, K]^T. Each row of x is quantized once to the activation format that
// pairs with w's type (quant.h, activation_dtype), then every output comes from an integer dot product on the
// packed weight blocks (block types) or an f32 dot product (F32 weights; F16 / BF16 weights with x rounded to
// their type first). Work is split into tasks of (up to kRowsPerTask rows of x) x (a chunk of weight rows);
// inside a task each weight row is dotted with tiles of kMaxRows activation rows while it is hot in L1, so a
// prompt of M rows reads the weights from memory once per task row group, not once per row.
// From kQGemmMinRows rows on, CPUs with AVX-512 VNNI run the prompt GEMM instead (quant/qgemm.h): weight panels
// packed per call, register-blocked tiles, results bit-for-bit those of the row kernels (block types, and F16 /
// BF16 weights where k is a multiple of 16).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/quant/matvec.h"
#include "backends/cpu/quant/qgemm.h"
#include "backends/cpu/quant/quant.h"

namespace rbee::cpu {

namespace {
// Rows of x per task: 16 rows of a 4096-wide Q8_0/Q8_K activation are ~70 KB, which stay in L2 while the
// task walks its weight rows.
constexpr int64_t kRowsPerTask = 16;

// Per-thread scratch for one qmatmul call (the quantized activation rows, the packed activation tiles): `bytes`
// bytes, 64-byte aligned, contents undefined; valid until the same slot is asked for again on this thread. Kept
// between calls (it grows to the largest call seen): a fresh multi-megabyte buffer per prompt matmul came from mmap
// and cost its page faults and the kernel's page clearing (4% of a Q4_K pp512), plus zero-filling by the vector.
enum class Scratch { kActivations, kActivationTiles };
unsigned char* scratch(Scratch slot, size_t bytes) {
  thread_local std::unique_ptr<unsigned char[]> buffers[2];
  thread_local size_t sizes[2] = {0, 0};
  const int i = (int)slot;
  if (sizes[i] < bytes + 64) {
    buffers[i].reset(new unsigned char[bytes + 64]);  // not value-initialized: callers write what they read
    sizes[i] = bytes + 64;
  }
  unsigned char* p = buffers[i].get();
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
}

// Runs fn(row_begin, row_end) over `rows` rows of `row_cost` bytes of work each, in parallel when worthwhile.
template <class Fn>
void for_rows(int64_t rows, int64_t row_cost, Fn&& fn) {
  if (rows == 0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row_cost, 1));
  if (rows <= grain) {
    fn(int64_t{0}, rows);
  } else {
    ThreadPool::global().parallel_for(rows, grain, fn);
  }
}
// The prompt GEMM (quant/qgemm.h): tasks own chunks of weight panels and all M rows. A task packs its panels
// once into a per-thread buffer, then walks blocks of gemm.block_rows activation rows across its panels (each
// panel in K slices of about gemm.slice_bytes) in tiles of gemm.tile_rows rows.
void run_qgemm(const quant::QGemm& gemm, int64_t m, int64_t n, int64_t k, const char* wp, int64_t w_row_bytes,
               const char* xp, int64_t x_row_bytes, float* dst, ThreadPool& pool) {
  const int64_t block_rows = gemm.block_rows;
  const int64_t pr = gemm.panel_rows, tr = gemm.tile_rows;
  const int64_t panels = (n + pr - 1) / pr;
  const int64_t panel_bytes = gemm.panel_bytes(k);
  // Enough tasks to balance the pool, each at most ~512 KiB of packed panels.
  const int64_t max_chunk = std::max<int64_t>(1, (int64_t{1} << 19) / panel_bytes);
  const int64_t want_tasks = std::max<int64_t>(1, (int64_t)pool.size() * 4);
  const int64_t chunk = std::clamp<int64_t>((panels + want_tasks - 1) / want_tasks, 1, max_chunk);
  const int64_t tasks = (panels + chunk - 1) / chunk;
  // Activation tiles packed once (gemm.pack_x: the tile's rows interleaved block by block), else the rows.
  const unsigned char* xtiles = nullptr;
  const int64_t x_tile_bytes = gemm.pack_x ? gemm.x_tile_bytes(k) : 0;
  if (gemm.pack_x) {
    const int64_t ntiles = (m + tr - 1) / tr;
    unsigned char* xb = scratch(Scratch::kActivationTiles, (size_t)(ntiles * x_tile_bytes));  // pack_x writes it all
    pool.run(ntiles, [&](int64_t t) {
      gemm.pack_x(xp + t * tr * x_row_bytes, (size_t)x_row_bytes, (int)std::min<int64_t>(tr, m - t * tr), k,
                  xb + t * x_tile_bytes);
    });
    xtiles = xb;
  }
  auto task = [&](int64_t t) {
    thread_local std::vector<unsigned char> buffer;
    const int64_t p0 = t * chunk, p1 = std::min(panels, p0 + chunk);
    const size_t need = (size_t)((p1 - p0) * panel_bytes + 64);
    if (buffer.size() < need) buffer.resize(need);
    unsigned char* base = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
    for (int64_t p = p0; p < p1; ++p) {
      const int rows = (int)std::min<int64_t>(pr, n - p * pr);
      gemm.pack(wp + p * pr * w_row_bytes, w_row_bytes, rows, k, base + (p - p0) * panel_bytes);
    }
    // Partial sums of the row block's tiles while one panel walks K in slices (quant/qgemm.h, block_rows).
    thread_local std::vector<float> states;
    const int64_t tiles = block_rows / tr;
    if (states.size() < (size_t)(tiles * quant::kQGemmStateFloats + 16)) {
      states.resize((size_t)(tiles * quant::kQGemmStateFloats + 16));
    }
    float* state = states.data() + (16 - reinterpret_cast<uintptr_t>(states.data()) / sizeof(float) % 16) % 16;
    const int64_t blocks = k / gemm.block_elems;
    const int64_t slice = std::max<int64_t>(1, gemm.slice_bytes / gemm.panel_block_bytes);
    for (int64_t r0 = 0; r0 < m; r0 += block_rows) {
      const int64_t r1 = std::min(m, r0 + block_rows);
      for (int64_t p = p0; p < p1; ++p) {
        const int cols = (int)std::min<int64_t>(pr, n - p * pr);
        const unsigned char* panel = base + (p - p0) * panel_bytes;
        for (int64_t b0 = 0; b0 < blocks; b0 += slice) {
          const int64_t b1 = std::min(blocks, b0 + slice);
          for (int64_t r = r0; r < r1; r += tr) {
            const int rows = (int)std::min<int64_t>(tr, r1 - r);
            float* st = state + (r - r0) / tr * quant::kQGemmStateFloats;
            const void* x = xtiles ? (const void*)(xtiles + r / tr * x_tile_bytes) : (const void*)(xp + r * x_row_bytes);
            gemm.tile(k, panel, x, (size_t)x_row_bytes, rows, dst + r * n + p * pr, n, cols, b0, b1, st);
          }
        }
      }
    }
  };
  if (tasks == 1) {
    task(0);
  } else {
    pool.run(tasks, task);
  }
}
}  // namespace

void CpuKernels::quantize(const Tensor& x, Tensor& out) {
  const int64_t rows = x.dim(0), k = x.dim(1);
  const DType type = out.dtype();
  const int64_t row_bytes = dtype_row_bytes(type, k);
  const float* src = static_cast<const float*>(x.data());
  char* dst = static_cast<char*>(out.data());
  // K-quant searches cost ~100x a plain pass per element: weight the grain accordingly.
  const int64_t cost = k * (dtype_block_size(type) == 256 ? 64 : 4);
  for_rows(rows, cost, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quant::quantize_row(type, src + r * k, dst + r * row_bytes, k);
  });
}

void CpuKernels::dequantize(const Tensor& q, Tensor& out) {
  const int64_t rows = q.dim(0), k = q.dim(1);
  const DType type = q.dtype();
  const int64_t row_bytes = dtype_row_bytes(type, k);
  const char* src = static_cast<const char*>(q.data());
  float* dst = static_cast<float*>(out.data());
  for_rows(rows, k * 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quant::dequantize_row(type, src + r * row_bytes, dst + r * k, k);
  });
}

void CpuKernels::qmatmul(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  float* dst = static_cast<float*>(out.data());
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(dst, dst + m * n, 0.f);
    return;
  }
  const DType wtype = w.dtype();
  const quant::RowDotFn dot = quant::row_dot_kernel(wtype);
  const int64_t w_row_bytes = dtype_row_bytes(wtype, k);
  const char* wp = static_cast<const char*>(w.data());

  // Activations: x itself for F32 weights, else each row quantized (or rounded to 16 bits) once.
  const char* xp = static_cast<const char*>(x.data());
  int64_t x_row_bytes = k * (int64_t)sizeof(float);
  if (wtype != DType::F32) {
    const int64_t row_bytes = quant::activation_row_bytes(wtype, k);
    x_row_bytes = (row_bytes + 63) / 64 * 64;  // rows start on cache lines; the padding is zeroed
    unsigned char* base = scratch(Scratch::kActivations, (size_t)(m * x_row_bytes));
    const float* xf = static_cast<const float*>(x.data());
    for_rows(m, k * 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        quant::quantize_activation_row(wtype, xf + r * k, base + r * x_row_bytes, k);
        std::memset(base + r * x_row_bytes + row_bytes, 0, (size_t)(x_row_bytes - row_bytes));
      }
    });
    xp = reinterpret_cast<const char*>(base);
  }

  ThreadPool& pool = ThreadPool::global();
  if (m >= quant::kQGemmMinRows) {
    const quant::QGemm* gemm = quant::qgemm_kernel(wtype);
    if (gemm != nullptr && k % gemm->block_elems == 0) {
      run_qgemm(*gemm, m, n, k, wp, w_row_bytes, xp, x_row_bytes, dst, pool);
      return;
    }
  }

  if (m == 1) {
    if (const quant::MatVecFn mv = quant::matvec_kernel(wtype)) {
      // Chunks of whole groups of kMatVecRows weight rows (at least ~32 KiB of weights each), 8 per thread.
      constexpr int64_t g = quant::kMatVecRows;
      const int64_t groups = (n + g - 1) / g;
      const int64_t min_groups = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(g * w_row_bytes, 1));
      const int64_t per = std::max(min_groups, (groups + pool.size() * 8 - 1) / (pool.size() * 8));
      const int64_t tasks = (groups + per - 1) / per;
      auto task = [&](int64_t t) {
        const int64_t g1 = std::min(groups, (t + 1) * per);
        for (int64_t i = t * per; i < g1; ++i) {
          mv(k, wp + i * g * w_row_bytes, w_row_bytes, (int)std::min<int64_t>(g, n - i * g), xp, dst + i * g);
        }
      };
      if (tasks == 1) {
        task(0);
      } else {
        pool.run(tasks, task);
      }
      return;
    }
  }

  // Tasks: row groups of x times chunks of weight rows, enough of them to balance the pool.
  const int64_t row_groups = (m + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t min_chunk = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(w_row_bytes, 1));
  const int64_t want_chunks = std::max<int64_t>(1, (int64_t)pool.size() * 8 / row_groups);
  const int64_t chunk = std::max(min_chunk, (n + want_chunks - 1) / want_chunks);
  const int64_t n_chunks = (n + chunk - 1) / chunk;

  auto task = [&](int64_t t) {
    const int64_t g = t / n_chunks, c = t % n_chunks;
    const int64_t r0 = g * kRowsPerTask, r1 = std::min(m, r0 + kRowsPerTask);
    const int64_t n0 = c * chunk, n1 = std::min(n, n0 + chunk);
    for (int64_t j = n0; j < n1; ++j) {
      const char* wrow = wp + j * w_row_bytes;
      for (int64_t r = r0; r < r1; r += quant::kMaxRows) {
        const int rows = (int)std::min<int64_t>(quant::kMaxRows, r1 - r);
        dot(k, wrow, xp + r * x_row_bytes, (size_t)x_row_bytes, rows, dst + r * n + j, n);
      }
    }
  };
  const int64_t tasks = row_groups * n_chunks;
  if (tasks == 1) {
    task(0);
  } else {
    pool.run(tasks, task);
  }
}

}  // namespace rbee::cpu
