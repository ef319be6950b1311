// CPU paged KV cache: kv_cache_write and paged_attention (flash-style online softmax over cache blocks).
// The per-key inner products and accumulations run through Highway with run-time dispatch, reading the
// cache in its own dtype (f16/bf16 promoted to f32 in registers).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_paged_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One cache element as f32 (for loop tails).
template <class K>
inline float ElementToF32(const K& x) {
  if constexpr (std::is_same_v<K, float>) {
    return x;
  } else {
    uint16_t bits;
    std::memcpy(&bits, &x, 2);
    if constexpr (std::is_same_v<K, hwy::bfloat16_t>) return rbee::bf16_bits_to_f32(bits);
    else return rbee::f16_bits_to_f32(bits);
  }
}

// dot(q[0..d), k[0..d)) with k in f32 / f16 / bf16 (raw 16-bit storage).
template <class K>
float DotQK(const float* HWY_RESTRICT q, const K* HWY_RESTRICT k, int64_t d) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * (int64_t)n <= d; i += 2 * n) {
    if constexpr (std::is_same_v<K, float>) {
      acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::LoadU(df, k + i), acc0);
      acc1 = hn::MulAdd(hn::LoadU(df, q + i + n), hn::LoadU(df, k + i + n), acc1);
    } else {
      const hn::Rebind<K, decltype(df)> dk;
      acc0 = hn::MulAdd(hn::LoadU(df, q + i), hn::PromoteTo(df, hn::LoadU(dk, k + i)), acc0);
      acc1 = hn::MulAdd(hn::LoadU(df, q + i + n), hn::PromoteTo(df, hn::LoadU(dk, k + i + n)), acc1);
    }
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < d; ++i) sum += q[i] * ElementToF32(k[i]);
  return sum;
}

// acc[0..d) = acc * scale + p * v (v in f32 / f16 / bf16).
template <class V>
void ScaleAddV(float* HWY_RESTRICT acc, float scale, float p, const V* HWY_RESTRICT v, int64_t d) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), vp = hn::Set(df, p);
  int64_t i = 0;
  for (; i + (int64_t)n <= d; i += n) {
    hn::Vec<decltype(df)> vv;
    if constexpr (std::is_same_v<V, float>) {
      vv = hn::LoadU(df, v + i);
    } else {
      const hn::Rebind<V, decltype(df)> dv;
      vv = hn::PromoteTo(df, hn::LoadU(dv, v + i));
    }
    hn::StoreU(hn::MulAdd(vp, vv, hn::Mul(vs, hn::LoadU(df, acc + i))), df, acc + i);
  }
  for (; i < d; ++i) acc[i] = acc[i] * scale + p * ElementToF32(v[i]);
}

template <class C>
void PagedAttentionTyped(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                         const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                         const rbee::AttentionParams& params, rbee::Tensor& out) {
  const int64_t n_seq = seq_info.dim(0);
  const int64_t max_blocks = block_tables.dim(1);
  const int64_t block_size = k_cache.dim(1), hkv = k_cache.dim(2), d = k_cache.dim(3);
  const int64_t hq = q.dim(1);
  const int64_t group = hq / hkv;
  const int32_t* info = static_cast<const int32_t*>(seq_info.data());
  const int32_t* tables = static_cast<const int32_t*>(block_tables.data());
  const float* qp = static_cast<const float*>(q.data());
  const C* kc = static_cast<const C*>(k_cache.data());
  const C* vc = static_cast<const C*>(v_cache.data());
  float* op = static_cast<float*>(out.data());
  const int64_t q_s0 = q.stride(0), q_s1 = q.stride(1);
  const int64_t row_stride = hkv * d;  // elements between consecutive positions inside a block

  // Task list: (sequence, query token) pairs x query heads.
  std::vector<std::pair<int64_t, int64_t>> tokens;  // (sequence, token index in q)
  for (int64_t b = 0; b < n_seq; ++b) {
    for (int64_t i = 0; i < info[b * 3 + 1]; ++i) tokens.emplace_back(b, info[b * 3] + i);
  }
  rbee::ThreadPool::global().run((int64_t)tokens.size() * hq, [&](int64_t task) {
    const auto [b, t] = tokens[(size_t)(task / hq)];
    const int64_t h = task % hq, g = h / group;
    const int64_t q_start = info[b * 3], q_len = info[b * 3 + 1], ctx = info[b * 3 + 2];
    const int64_t pos = ctx - q_len + (t - q_start);
    const int64_t first = params.window > 0 ? std::max<int64_t>(0, pos - params.window + 1) : 0;
    const float* qv = qp + t * q_s0 + h * q_s1;
    float* acc = op + (t * hq + h) * d;
    for (int64_t i = 0; i < d; ++i) acc[i] = 0.0f;
    float running_max = -std::numeric_limits<float>::infinity(), running_sum = 0.0f;
    const int32_t* table = tables + b * max_blocks;
    for (int64_t j = first; j <= pos; ++j) {
      const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
      const C* kj = kc + slot * row_stride + g * d;
      float s = DotQK(qv, kj, d) * params.scale;
      if (params.softcap > 0.0f) s = params.softcap * std::tanh(s / params.softcap);
      const float new_max = std::max(running_max, s);
      const float correction = std::exp(running_max - new_max);  // 0 on the first key
      const float p = std::exp(s - new_max);
      running_sum = running_sum * correction + p;
      running_max = new_max;
      ScaleAddV(acc, correction, p, vc + slot * row_stride + g * d, d);
    }
    const float inv = running_sum > 0 ? 1.0f / running_sum : 0.0f;
    for (int64_t i = 0; i < d; ++i) acc[i] *= inv;
  });
}

void PagedAttention(const rbee::Tensor& q, const rbee::Tensor& k_cache, const rbee::Tensor& v_cache,
                    const rbee::Tensor& seq_info, const rbee::Tensor& block_tables,
                    const rbee::AttentionParams& params, rbee::Tensor& out) {
  switch (k_cache.dtype()) {
    case rbee::DType::F32:
      return PagedAttentionTyped<float>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    case rbee::DType::F16:
      return PagedAttentionTyped<hwy::float16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    case rbee::DType::BF16:
      return PagedAttentionTyped<hwy::bfloat16_t>(q, k_cache, v_cache, seq_info, block_tables, params, out);
    default:
      RBEE_THROW(rbee::ErrorCode::Unsupported, "paged_attention: cache dtype {}", rbee::dtype_name(k_cache.dtype()));
  }
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {

HWY_EXPORT(PagedAttention);

void CpuKernels::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                 Tensor& out) {
  HWY_DYNAMIC_DISPATCH(PagedAttention)(q, k_cache, v_cache, seq_info, block_tables, params, out);
}

void CpuKernels::kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                                Tensor& v_cache) {
  const int64_t n = k.dim(0), hkv = k.dim(1), d = k.dim(2);
  const int32_t* slot = static_cast<const int32_t*>(slots.data());
  for (const auto& [src, dst] : {std::pair<const Tensor*, Tensor*>{&k, &k_cache}, {&v, &v_cache}}) {
    const Tensor& s = *src;
    visit_float_dtype(s.dtype(), [&](auto in_tag) {
      using I = decltype(in_tag);
      visit_float_dtype(dst->dtype(), [&](auto out_tag) {
        using O = decltype(out_tag);
        const I* sp = static_cast<const I*>(s.data());
        O* dp = static_cast<O*>(dst->data());
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t h = 0; h < hkv; ++h) {
            const I* row = sp + r * s.stride(0) + h * s.stride(1);
            O* o = dp + ((int64_t)slot[r] * hkv + h) * d;
            for (int64_t i = 0; i < d; ++i) o[i] = from_float<O>(to_float(row[i]));
          }
        }
      });
    });
  }
}

}  // namespace rbee::cpu
#endif
