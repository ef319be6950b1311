// Prompt-sized quantized matmul on the CPU (M >= kQGemmMinRows): weight rows packed into panels of
// QGemm::panel_rows rows, block by block, with the levels unpacked to unsigned bytes and the scales to f32 /
// int16, then a register-blocked micro-kernel computes tiles of up to QGemm::tile_rows activation rows x one panel.
//
// Contract: every output is bit-for-bit what the row kernels (quant.h, row_dot_kernel on the AVX2 / AVX3 target)
// give: the accumulation order quant.h states (Q4_0 / Q5_0 / Q8_0 / Q8_1: one int32 per block and one f32 fma
// per block in block order; the _1 types and K-quants: the same int32 lanes, f32 scaling per block and
// horizontal sum as the row kernels). So which path computes a row (decode M = 1 or a prompt tile) never changes
// its result, and the llama.cpp goldens stay as they are.
//
// F16 / BF16 weights: the same driver with panels of the weights widened to f32 and the Highway row kernel's order
// (qgemm_float_avx512.cpp).
//
// Packing happens per qmatmul call, one panel per task before its row tiles run (its cost is one pass over the
// weights, amortized over the M activation rows); decode keeps the original GGUF layout and the row kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::cpu::quant {

inline constexpr int kQGemmMaxTileRows = 8;  // activation rows per micro-kernel call, at most
inline constexpr int64_t kQGemmMinRows = 16;  // smaller M runs the row kernels (packing costs more there)

struct QGemm {
  // Bytes of one packed panel of panel_rows weight rows of k elements (a multiple of 64).
  int64_t (*panel_bytes)(int64_t k);
  // Packs rows [0, rows) (rows <= panel_rows) of the weight rows at w (w_row_bytes apart) into panel
  // (64-byte aligned); missing rows are packed as zeros.
  void (*pack)(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel);
  // out[r * os + c] = dot(weight row c of the panel, activation row r) for r < mrows (<= tile_rows),
  // c < ncols; activation row r at (const char*)x + r * xs, laid out as quant.h's activation rows.
  // One call covers blocks [b0, b1) of the k / block_elems blocks, so a caller can walk K in slices that keep a
  // panel slice in L1: the partial sums live in `state` (kQGemmStateFloats floats, 64-byte aligned) between
  // calls; b0 == 0 starts them at zero, b1 == the last block writes out. The per-block order is unchanged.
  void (*tile)(int64_t k, const void* panel, const void* x, size_t xs, int mrows, float* out, int64_t os, int ncols,
               int64_t b0, int64_t b1, float* state);
  // Activations: nullptr, or (x_tile_bytes, pack_x): the caller packs each tile of up to tile_rows activation rows
  // (quant.h's rows, xs bytes apart; rows missing from a last tile are zeros) once per call into x_tile_bytes(k)
  // bytes (64-byte aligned), the rows' blocks interleaved so the micro-kernel reads every row from one pointer at
  // fixed offsets; tile then gets that packed tile as x (xs unused).
  int64_t (*x_tile_bytes)(int64_t k);
  void (*pack_x)(const void* x, size_t xs, int rows, int64_t k, void* dst);
  int64_t block_elems;       // elements per block (32 or 256; F16 / BF16: 16); the GEMM runs only where it divides k
  int64_t panel_block_bytes;  // packed bytes per block of a panel (for choosing the slice)
  int panel_rows;             // weight rows per packed panel (4, 6 or 16)
  int tile_rows;              // activation rows per tile call (2, 4 or 8; divides block_rows)
  // Loop blocking of the driver (cpu_quant.cpp, run_qgemm): block_rows activation rows (a multiple of tile_rows,
  // dividing 64) walk each panel of a task together, the panel in K slices of about slice_bytes packed bytes.
  //   - 64 rows, 16 KiB slices (F16 / BF16, Q4_1 / Q5_1): a panel slice stays in L1 while the 64 rows' tiles pass.
  //   - one tile of 8 rows, 64 KiB slices (the int8 panels with packed activation tiles): the packed tile stays in
  //     L1 while the task's panels stream from L2 in order; on Zen 5 the GEMM loop ran 10-30% faster so (Q4_0,
  //     Q8_0, Q3_K, Q4_K, Q6_K; perf-notes/quant.md, session 9) than with 64 rows in 16 KiB slices, whose 8 tiles
  //     read their activation slices from L2 in short strided pieces.
  int block_rows;
  int64_t slice_bytes;
};
// >= 4 rows x (2 x 16 + 4), 8 rows x 16 and (F16 / BF16) 2 rows x 6 weight rows x 2 x 16; a multiple of 16.
inline constexpr int kQGemmStateFloats = 384;

// The GEMM for `weight` on this CPU, or nullptr (no AVX-512 VNNI, a Highway target other than AVX2 / AVX3 chosen
// for the row kernels (F16 / BF16: other than AVX3, whose lane count sets their order), RBEE_CPU_QGEMM=0 in the
// environment, or a type without one). Block types and F16 / BF16 (qgemm_float_avx512.cpp); not F32.
const QGemm* qgemm_kernel(DType weight);

}  // namespace rbee::cpu::quant
