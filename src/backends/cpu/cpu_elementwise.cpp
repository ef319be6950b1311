// CPU elementwise ops: unary, binary, the map ops (affine, ...), cast, copy, fill, arange, where.
// All read their inputs through strides; the inner loop is specialised for unit strides.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/common/scalar_ops.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

// f(x) by the shared formula (backends/common/scalar_ops.h); for integers only the functions defined on them.
template <class C>
inline C apply_unary(UnaryOp op, C x, double param) {
  if constexpr (std::is_integral_v<C>) {
    if (!scalar::unary_defined_for_integers(op)) {
      RBEE_THROW(ErrorCode::Unsupported, "unary {} is not defined for integers", unary_op_name(op));
    }
    return scalar::unary_value<C>(op, x, C(0));
  } else {
    return scalar::unary_value<C>(op, x, C(param));
  }
}

// Binary ops and conversions: one definition with the GPU kernels (backends/common/scalar_ops.h).
using scalar::binary_value;
using scalar::convert_value;

}  // namespace

void CpuKernels::unary(UnaryOp op, double param, const Tensor& x, Tensor& out) {
  visit_plain_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, uint32_t> || std::is_same_v<T, uint8_t>) {
      RBEE_THROW(ErrorCode::Unsupported, "unary {} is not defined for {}", unary_op_name(op), dtype_name(x.dtype()));
    } else {
      const T* src = static_cast<const T*>(x.data());
      T* dst = static_cast<T*>(out.data());
      const Strides out_strides = out.shape().contiguous_strides();
      for_each_row<2>(x.shape(), {x.strides(), out_strides}, [&](auto base, auto inner, int64_t len) {
        const T* s = src + base[0];
        T* d = dst + base[1];
        if (inner[0] == 1) {
          for (int64_t i = 0; i < len; ++i) d[i] = store<T>(apply_unary<C>(op, load(s[i]), param));
        } else {
          for (int64_t i = 0; i < len; ++i) d[i] = store<T>(apply_unary<C>(op, load(s[i * inner[0]]), param));
        }
      });
    }
  });
}

void CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_plain_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data());
    const T* pb = static_cast<const T*>(b.data());
    const Strides out_strides = out.shape().contiguous_strides();
    auto run = [&](auto out_tag) {
      using O = decltype(out_tag);
      O* po = static_cast<O*>(out.data());
      for_each_row<3>(out.shape(), {a.strides(), b.strides(), out_strides}, [&](auto base, auto inner, int64_t len) {
        const T* x = pa + base[0];
        const T* y = pb + base[1];
        O* d = po + base[2];
        auto value = [&](int64_t i) {
          const C r = binary_value<C>(op, load(x[i * inner[0]]), load(y[i * inner[1]]));
          if constexpr (std::is_same_v<O, uint8_t> && !std::is_same_v<T, uint8_t>) return (O)(r != C(0));
          else return store<O>(r);
        };
        if (inner[0] == 1 && inner[1] == 1 && op == BinaryOp::Add) {
          for (int64_t i = 0; i < len; ++i) d[i] = store<O>(load(x[i]) + load(y[i]));
        } else if (inner[0] == 1 && inner[1] == 1 && op == BinaryOp::Mul) {
          for (int64_t i = 0; i < len; ++i) d[i] = store<O>(load(x[i]) * load(y[i]));
        } else {
          for (int64_t i = 0; i < len; ++i) d[i] = value(i);
        }
      });
    };
    if (is_comparison(op)) run(uint8_t{});
    else run(T{});
  });
}

namespace {

// The map ops of the op table (RBEE_MAP_OP): out[i] = f(x[i]), f = Formula<C> built once from the op's scalars.
template <template <class> class Formula, class... Scalars>
void map_values(const Tensor& x, Tensor& out, Scalars... scalars) {
  visit_float_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Formula<compute_t<T>> f(scalars...);
    const T* src = static_cast<const T*>(x.data());
    T* dst = static_cast<T*>(out.data());
    for_each_row<2>(x.shape(), {x.strides(), out.shape().contiguous_strides()}, [&](auto base, auto inner, int64_t len) {
      for (int64_t i = 0; i < len; ++i) dst[base[1] + i] = store<T>(f(load(src[base[0] + i * inner[0]])));
    });
  });
}
}  // namespace

#define RBEE_OP(Kind, rule, backends, method, params)
#define RBEE_MAP_OP(Kind, method, Formula, scalars, args)                 \
  void CpuKernels::method RBEE_MAP_OP_PARAMS scalars {                     \
    map_values<scalar::Formula>(x, out, RBEE_MAP_OP_ARGS args);           \
  }
#include "rbee/backend/op_table.def"

void CpuKernels::cast(const Tensor& x, Tensor& out) {
  visit_plain_dtype(x.dtype(), [&](auto in_tag) {
    using I = decltype(in_tag);
    visit_plain_dtype(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      const I* src = static_cast<const I*>(x.data());
      O* dst = static_cast<O*>(out.data());
      for_each_row<2>(x.shape(), {x.strides(), out.shape().contiguous_strides()},
                      [&](auto base, auto inner, int64_t len) {
                        for (int64_t i = 0; i < len; ++i) {
                          // Through the widest exact type: f16/bf16 -> float, ints and f64 as they are.
                          const auto v = load(src[base[0] + i * inner[0]]);
                          if constexpr (std::is_same_v<O, f16> || std::is_same_v<O, bf16>) {
                            dst[base[1] + i] = O((float)v);
                          } else {
                            dst[base[1] + i] = convert_value<O>(v);
                          }
                        }
                      });
    });
  });
}

void CpuKernels::copy(const Tensor& src, Tensor& dst) {
  if (is_quantized(src.dtype())) {
    // Whole rows of packed blocks: strides are in elements and multiples of the block size.
    const int64_t row_bytes = dtype_row_bytes(src.dtype(), src.dim(-1));
    const int bs = dtype_block_size(src.dtype()), ts = dtype_type_size(src.dtype());
    const char* s = static_cast<const char*>(src.data());
    char* d = static_cast<char*>(dst.data());
    Shape rows_shape = src.shape();
    rows_shape[rows_shape.rank() - 1] = 1;
    for_each_row<2>(rows_shape, {src.strides(), dst.strides()}, [&](auto base, auto, int64_t) {
      std::memcpy(d + base[1] / bs * ts, s + base[0] / bs * ts, (size_t)row_bytes);
    });
    return;
  }
  const int es = dtype_type_size(src.dtype());
  const char* s = static_cast<const char*>(src.data());
  char* d = static_cast<char*>(dst.data());
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(d, s, (size_t)(src.numel() * es));
    return;
  }
  visit_plain_dtype(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* ps = reinterpret_cast<const T*>(s);
    T* pd = reinterpret_cast<T*>(d);
    for_each_row<2>(src.shape(), {src.strides(), dst.strides()}, [&](auto base, auto inner, int64_t len) {
      if (inner[0] == 1 && inner[1] == 1) {
        std::memcpy(pd + base[1], ps + base[0], (size_t)len * sizeof(T));
      } else {
        for (int64_t i = 0; i < len; ++i) pd[base[1] + i * inner[1]] = ps[base[0] + i * inner[0]];
      }
    });
  });
}

void CpuKernels::fill(Tensor& dst, double value) {
  visit_plain_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) v = T((float)value);
    else v = convert_value<T>(value);
    T* d = static_cast<T*>(dst.data());
    for_each_row<1>(dst.shape(), {dst.strides()}, [&](auto base, auto inner, int64_t len) {
      for (int64_t i = 0; i < len; ++i) d[base[0] + i * inner[0]] = v;
    });
  });
}

void CpuKernels::arange(Tensor& out, double start, double step) {
  visit_plain_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(out.data());
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v = start + (double)i * step;
      if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) d[i] = T((float)v);
      else d[i] = convert_value<T>(v);
    }
  });
}

void CpuKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_plain_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* pc = static_cast<const uint8_t*>(cond.data());
    const T* pa = static_cast<const T*>(a.data());
    const T* pb = static_cast<const T*>(b.data());
    T* po = static_cast<T*>(out.data());
    for_each_row<4>(out.shape(), {cond.strides(), a.strides(), b.strides(), out.shape().contiguous_strides()},
                    [&](auto base, auto inner, int64_t len) {
                      for (int64_t i = 0; i < len; ++i) {
                        po[base[3] + i] = pc[base[0] + i * inner[0]] ? pa[base[1] + i * inner[1]]
                                                                     : pb[base[2] + i * inner[2]];
                      }
                    });
  });
}

}  // namespace rbee::cpu
