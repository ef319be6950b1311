// Column packing shared by the CPU convolution kernels: the "im2col" step of im2col + GEMM, done one tile of
// output positions at a time so the column buffer stays cache-sized whatever the image size.
//
// Both convolution directions reduce to the same access pattern. The output is a grid of positions
// (qy, qx); a kernel tap t adds a fixed offset (dy_t, dx_t) to the scaled position, so column row (c, t) holds
//   x[c, qy * sy + dy_t, qx * sx + dx_t]   (zero outside the input plane)
// Convolution: the grid is the output, s = stride, d = tap * dilation - padding.
// Transposed convolution, split by output phase (oy % stride): the grid is one phase's outputs, s = 1, and d
// is the (exact) input offset of each tap that reaches that phase.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_common.h"

namespace rbee::cpu::conv {

struct Tap {
  int64_t dy, dx;
};

// The input of one (image, group): `channels` contiguous planes of h x w, already in the compute type.
template <class C>
struct ColumnSource {
  const C* x;
  int64_t channels, h, w;
  int64_t sy, sx;    // grid position -> input coordinate scale
  int64_t grid_w;    // grid columns; position q is (q / grid_w, q % grid_w)
  std::span<const Tap> taps;
};

inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }  // b > 0
inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }  // b > 0

// col[(c * taps + t) * count + j] = the source value of tap t, channel c at grid position q0 + j (j < count).
template <class C>
void pack_columns(const ColumnSource<C>& s, int64_t q0, int64_t count, C* col) {
  const int64_t ntaps = (int64_t)s.taps.size();
  for (int64_t c = 0; c < s.channels; ++c) {
    const C* plane = s.x + c * s.h * s.w;
    for (int64_t t = 0; t < ntaps; ++t) {
      const Tap tap = s.taps[(size_t)t];
      C* dst = col + (c * ntaps + t) * count;
      // Walk the tile one grid row at a time: within a row the input column is affine in qx.
      int64_t q = q0;
      const int64_t q_end = q0 + count;
      while (q < q_end) {
        const int64_t qy = q / s.grid_w, qx0 = q % s.grid_w;
        const int64_t qx1 = std::min(s.grid_w, qx0 + (q_end - q));
        C* d = dst + (q - q0);  // d[qx - qx0]
        const int64_t iy = qy * s.sy + tap.dy;
        if (iy < 0 || iy >= s.h) {
          std::fill(d, d + (qx1 - qx0), C(0));
        } else {
          // qx in [lo, hi) read inside the row; the rest is padding
          const int64_t lo = std::clamp(ceil_div(-tap.dx, s.sx), qx0, qx1);
          const int64_t hi = std::clamp(floor_div(s.w - 1 - tap.dx, s.sx) + 1, lo, qx1);
          std::fill(d, d + (lo - qx0), C(0));
          const C* row = plane + iy * s.w;
          C* out = d + (lo - qx0);
          const int64_t n = hi - lo;
          if (n <= 0) {
            // the whole segment is padding
          } else if (s.sx == 1) {
            std::memcpy(out, row + lo + tap.dx, (size_t)n * sizeof(C));
          } else {
            const C* src = row + lo * s.sx + tap.dx;
            for (int64_t i = 0; i < n; ++i) out[i] = src[i * s.sx];
          }
          std::fill(d + (hi - qx0), d + (qx1 - qx0), C(0));
        }
        q += qx1 - qx0;
      }
    }
  }
}

// Output positions per GEMM call: a column buffer of about kColumnBudget elements (4 MiB of f32; the GEMM packs
// it again KC rows at a time, so it only needs to stay in L3), between 64 and 1024 positions, and small enough
// that `outer` (independent images x groups) times the tile count gives every thread two tasks.
inline int64_t column_tile(int64_t positions, int64_t depth, int64_t outer) {
  constexpr int64_t kColumnBudget = 1 << 20, kMin = 64, kMax = 1024;
  const int64_t threads = ThreadPool::global().size();
  int64_t tile = std::clamp(kColumnBudget / std::max<int64_t>(depth, 1) / 16 * 16, kMin, kMax);
  while (tile > kMin && outer * ((positions + tile - 1) / tile) < 2 * threads) {
    tile = std::max(kMin, tile / 2 / 16 * 16);
  }
  return std::max<int64_t>(1, std::min(tile, positions));
}

// p[0, n) in the compute type: p itself for F32/F64; for F16/BF16 a widened copy, made once in parallel so the
// packing (which reads every input element KH * KW times) and the GEMM only ever see f32.
template <class T>
class Widened {
 public:
  using C = compute_t<T>;
  Widened(const T* p, int64_t n) {
    if constexpr (std::is_same_v<T, C>) {
      data_ = p;
    } else {
      copy_.reset(new C[(size_t)n]);
      C* dst = copy_.get();
      ThreadPool::global().parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = load(p[i]);
      });
      data_ = dst;
    }
  }
  const C* data() const { return data_; }

 private:
  std::unique_ptr<C[]> copy_;
  const C* data_ = nullptr;
};

}  // namespace rbee::cpu::conv
