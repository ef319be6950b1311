// CPU transposed convolutions (conv_transpose1d, conv_transpose2d), in the gather formulation:
//   out[n, co, oy, ox] = sum over ci of the group and taps (ky, kx) with oy + ph - ky * dh = iy * sh (and the same
//                        for x), 0 <= iy < h, 0 <= ix < w, of x[n, ci, iy, ix] * w[ci, co % (Cout/g), ky, kx]
// Which taps satisfy the divisibility depends only on the output phase (oy % sh, ox % sw). So the output splits
// into sh * sw phase grids; on each, the op is an ordinary stride-1 correlation with that phase's taps, whose
// input offsets (oy + ph - ky * dh) / sh - qy are constants. Each phase is column packing + GEMM like conv2d,
// with the weights of its taps gathered into [Cout/g, Cin/g * taps]; no multiply is spent on the zeros a
// "dilate the input, then convolve" scheme would insert.
#include <memory>
#include <vector>

#include "backends/common/conv_geometry.h"
#include "backends/cpu/conv_columns.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

using ::rbee::conv::ConvGeometry;
using ::rbee::conv::geometry_1d;
using ::rbee::conv::geometry_2d;
using conv::Tap;

// One output phase: outputs (py + sh * qy, px + sw * qx) for qy < rows, qx < cols.
template <class C>
struct Phase {
  int64_t py, px, rows, cols;
  std::vector<Tap> taps;    // input offsets of the taps that reach this phase
  std::vector<C> weights;   // [groups][cout_g][cin_g * taps.size()]
};

// Taps along one axis that reach outputs of phase `p`, as (kernel index, input offset).
std::vector<std::pair<int64_t, int64_t>> phase_taps(int64_t p, int64_t k, int64_t stride, int64_t pad,
                                                    int64_t dilation) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t v = p + pad - i * dilation;
    if (((v % stride) + stride) % stride == 0) out.push_back({i, v / stride});  // exact division
  }
  return out;
}

// x [n, cin, h, w], w [cin, cout / groups, kh, kw] -> out [n, cout, ho, wo], all contiguous.
template <class T>
void conv_transpose_forward(const T* x, const T* w, const ConvGeometry& g, T* out) {
  using C = compute_t<T>;
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups, plane = g.h * g.w;
  const int64_t positions = g.ho * g.wo, ksize = g.kh * g.kw;
  const conv::Widened<T> xw(x, g.n * g.cin * plane);

  std::vector<Phase<C>> phases;
  int64_t max_depth = 1;
  for (int64_t py = 0; py < std::min(g.sh, g.ho); ++py) {
    for (int64_t px = 0; px < std::min(g.sw, g.wo); ++px) {
      Phase<C> ph{py, px, (g.ho - py + g.sh - 1) / g.sh, (g.wo - px + g.sw - 1) / g.sw, {}, {}};
      std::vector<int64_t> kernel_index;
      for (const auto& [ky, dy] : phase_taps(py, g.kh, g.sh, g.ph, g.dh)) {
        for (const auto& [kx, dx] : phase_taps(px, g.kw, g.sw, g.pw, g.dw)) {
          ph.taps.push_back({dy, dx});
          kernel_index.push_back(ky * g.kw + kx);
        }
      }
      const int64_t ntaps = (int64_t)ph.taps.size(), depth = cin_g * ntaps;
      ph.weights.resize((size_t)(g.groups * cout_g * depth));
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        for (int64_t co = 0; co < cout_g; ++co) {
          C* row = ph.weights.data() + (gi * cout_g + co) * depth;
          for (int64_t ci = 0; ci < cin_g; ++ci) {
            const T* wk = w + ((gi * cin_g + ci) * cout_g + co) * ksize;
            for (int64_t t = 0; t < ntaps; ++t) row[ci * ntaps + t] = load(wk[kernel_index[(size_t)t]]);
          }
        }
      }
      max_depth = std::max(max_depth, depth);
      phases.push_back(std::move(ph));
    }
  }

  // Work items per (image, group): (phase, first grid position, count).
  struct Item {
    int64_t phase, q0, count;
  };
  const int64_t tile = conv::column_tile(positions / std::max<int64_t>(1, (int64_t)phases.size()), max_depth,
                                         g.n * g.groups * (int64_t)phases.size());
  std::vector<Item> items;
  for (int64_t i = 0; i < (int64_t)phases.size(); ++i) {
    const int64_t grid = phases[(size_t)i].rows * phases[(size_t)i].cols;
    for (int64_t q0 = 0; q0 < grid; q0 += tile) items.push_back({i, q0, std::min(tile, grid - q0)});
  }
  const int64_t per_group = (int64_t)items.size();

  ThreadPool::global().parallel_for(g.n * g.groups * per_group, 1, [&](int64_t begin, int64_t end) {
    std::unique_ptr<C[]> col(new C[(size_t)(max_depth * tile)]);
    std::unique_ptr<C[]> acc(new C[(size_t)(cout_g * tile)]);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t img = task / (g.groups * per_group), gi = task / per_group % g.groups;
      const Item& item = items[(size_t)(task % per_group)];
      const Phase<C>& ph = phases[(size_t)item.phase];
      const int64_t depth = cin_g * (int64_t)ph.taps.size();
      const C* xg = xw.data() + (img * g.cin + gi * cin_g) * plane;
      T* og = out + (img * g.cout + gi * cout_g) * positions;
      if (depth > 0) {
        conv::pack_columns(conv::ColumnSource<C>{xg, cin_g, g.h, g.w, 1, 1, ph.cols, ph.taps}, item.q0, item.count,
                           col.get());
      }
      // K == 0 (no tap reaches this phase, e.g. a kernel smaller than the stride) yields zeros.
      conv_gemm(cout_g, item.count, depth, ph.weights.data() + gi * cout_g * depth, depth, col.get(), item.count,
                acc.get(), item.count);
      for (int64_t co = 0; co < cout_g; ++co) {
        const C* r = acc.get() + co * item.count;
        T* o = og + co * positions;
        for (int64_t j = 0; j < item.count; ++j) {
          const int64_t q = item.q0 + j;
          o[(ph.py + g.sh * (q / ph.cols)) * g.wo + ph.px + g.sw * (q % ph.cols)] = store<T>(r[j]);
        }
      }
    }
  });
}

}  // namespace

void CpuKernels::conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) {
  const ConvGeometry g = geometry_1d(x, w, out, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_transpose_forward(static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g,
                           static_cast<T*>(out.data()));
  });
}

void CpuKernels::conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) {
  const ConvGeometry g = geometry_2d(x, w, out, p);
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_transpose_forward(static_cast<const T*>(x.data()), static_cast<const T*>(w.data()), g,
                           static_cast<T*>(out.data()));
  });
}

}  // namespace rbee::cpu
