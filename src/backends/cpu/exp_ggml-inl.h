// ExpGgml: f32 exp for the kernels whose results follow llama.cpp's CPU backend bit for bit (SwiGLU, the
// f32-cache attention softmax). Included once per Highway target from inside those files' per-target
// compilation (Highway's -inl.h include-guard pattern). Elementwise, so every vector width gives the same values;
// they equal ggml's on targets with FMA (AVX2, AVX-512).
// Attribution: the scheme (range reduction, polynomial and the split of large exponents) follows ggml_v_expf of
// ggml's CPU backend (ggml / llama.cpp, https://github.com/ggml-org/ggml, MIT License, Copyright (c) 2023-2024
// The ggml authors); written anew for Highway. NOTICE holds the license text.
#if defined(RBEE_CPU_EXP_GGML_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_CPU_EXP_GGML_INL_H_
#undef RBEE_CPU_EXP_GGML_INL_H_
#else
#define RBEE_CPU_EXP_GGML_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(x) in f32 by the scheme ggml's CPU backend vectorizes (llama.cpp's numerics, so that SwiGLU outputs
// match it bit for bit): x = n ln2 + b with n = nearest(x / ln2) taken from the fraction bits of
// x * log2(e) + 1.5 * 2^23, b reduced with a two-part ln2; exp(b) - 1 by a degree-5 polynomial in b without
// constant term; result 2^n + 2^n (exp(b) - 1). Lanes with |n| > 126 split 2^n into two factors so that
// results overflow to inf or underflow through the subnormals gradually; |n| > 192 gives inf or 0 outright.
// Maximum error about 1.5 ulp.
template <class D>
HWY_INLINE hn::Vec<D> ExpGgml(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto shift = hn::Set(d, 0x1.8p23f);
  const auto z = hn::MulAdd(x, hn::Set(d, 0x1.715476p+0f), shift);
  const auto n = hn::Sub(z, shift);
  const auto b = hn::NegMulAdd(n, hn::Set(d, 0x1.7f7d1cp-20f), hn::NegMulAdd(n, hn::Set(d, 0x1.62e4p-1f), x));
  const auto e = hn::ShiftLeft<23>(hn::BitCast(di, z));  // n in the exponent field (two's complement)
  const auto k = hn::BitCast(d, hn::Add(e, hn::BitCast(di, hn::Set(d, 1.0f))));  // 2^n for |n| <= 126
  const auto u = hn::Mul(b, b);
  const auto j = hn::MulAdd(hn::MulAdd(hn::MulAdd(hn::Set(d, 0x1.0e4020p-7f), b, hn::Set(d, 0x1.573e2ep-5f)), u,
                                       hn::MulAdd(hn::Set(d, 0x1.555e66p-3f), b, hn::Set(d, 0x1.fffdb6p-2f))),
                            u, hn::Mul(hn::Set(d, 0x1.ffffecp-1f), b));  // exp(b) - 1
  const auto big = hn::Gt(hn::Abs(n), hn::Set(d, 126.0f));
  if (hn::AllFalse(d, big)) return hn::MulAdd(j, k, k);
  // 2^n = s1 * s2: s1 = 2^127 (n > 0) or 2^-125 (n <= 0), s2 carries the rest of the exponent.
  const auto neg = hn::BitCast(di, hn::VecFromMask(d, hn::Le(n, hn::Zero(d))));
  const auto g = hn::And(neg, hn::Set(di, (int32_t)0x82000000u));
  const auto s1 = hn::BitCast(d, hn::Add(g, hn::Set(di, 0x7f000000)));
  const auto s2 = hn::BitCast(d, hn::Sub(e, g));
  const auto huge = hn::Gt(hn::Abs(n), hn::Set(d, 192.0f));
  const auto split = hn::Mul(hn::MulAdd(s2, j, s2), s1);
  return hn::IfThenElse(huge, hn::Mul(s1, s1), hn::IfThenElse(big, split, hn::MulAdd(j, k, k)));
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
