// CPU sample op: one token per row of logits, by the definition in op_table.def with the arithmetic
// of backends/common/sampling.h (shared with the GPU kernel). Rows run in parallel; inside a row: adjusted
// logits, then top-k by partial selection, top-p over the survivors sorted by key, min-p, and the draw walks the
// survivors in id order.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backends/common/sampling.h"
#include "backends/cpu/cpu_common.h"
#include "backends/cpu/cpu_kernels.h"

namespace rbee::cpu {

namespace {

namespace s = ::rbee::sampling;

struct RowInputs {
  const float* logits;
  int64_t vocab;
  const float* params;    // kSampleParams
  const int64_t* control;  // kSampleControls
  const int32_t* tokens;  // [h, 2]
  const float* bias;      // [h]
  int64_t h;
};

struct Candidate {
  uint64_t key;
  float c;
  int32_t id;
  uint64_t w;
};

int32_t sample_row(const RowInputs& in, std::vector<float>& work, std::vector<Candidate>& cand) {
  const float* p = in.params;
  const float temperature = p[sample_col::kTemperature];
  const float* l = in.logits;
  if (in.h > 0) {
    work.assign(in.logits, in.logits + in.vocab);
    for (int64_t i = 0; i < in.h; ++i) {
      const int32_t id = in.tokens[2 * i], count = in.tokens[2 * i + 1];
      if (id < 0 || id >= in.vocab) continue;
      work[(size_t)id] = s::adjust(work[(size_t)id], in.bias[i], count, p[sample_col::kRepetition],
                                   p[sample_col::kPresence], p[sample_col::kFrequency]);
    }
    l = work.data();
  }
  if (!(temperature > 0.f)) {  // greedy
    uint64_t best = 0;
    for (int64_t i = 0; i < in.vocab; ++i) {
      if (!std::isnan(l[i])) best = std::max(best, s::order_key(l[i], (int32_t)i));
    }
    return best != 0 ? s::key_id(best) : -1;
  }
  cand.clear();
  for (int64_t i = 0; i < in.vocab; ++i) {
    if (!s::is_candidate(l[i])) continue;
    const float c = s::div(l[i], temperature);
    cand.push_back({s::order_key(c, (int32_t)i), c, (int32_t)i, 0});
  }
  if (cand.empty()) return -1;
  auto earlier = [](const Candidate& a, const Candidate& b) { return a.key > b.key; };
  const int64_t top_k = in.control[sample_col::kTopK];
  if (top_k > 0 && top_k < (int64_t)cand.size()) {
    std::nth_element(cand.begin(), cand.begin() + (top_k - 1), cand.end(), earlier);
    cand.resize((size_t)top_k);
  }
  float c_max = cand[0].c;
  uint64_t max_key = cand[0].key;
  for (const Candidate& x : cand) {
    if (x.key > max_key) max_key = x.key, c_max = x.c;
  }
  uint64_t total = 0;
  for (Candidate& x : cand) total += x.w = s::weight(x.c, c_max);
  const float top_p = p[sample_col::kTopP];
  if (top_p < 1.f) {
    std::sort(cand.begin(), cand.end(), earlier);
    const double threshold = s::top_p_threshold(total, top_p);
    uint64_t cum = 0;
    size_t keep = cand.size();
    for (size_t i = 0; i < cand.size(); ++i) {
      cum += cand[i].w;
      if (s::reaches(cum, threshold)) {
        keep = i + 1;
        break;
      }
    }
    cand.resize(keep);
  }
  const float min_p = p[sample_col::kMinP];
  if (min_p > 0.f) {
    const double threshold = s::min_p_threshold(min_p);
    std::erase_if(cand, [&](const Candidate& x) { return !((double)x.w >= threshold); });
  }
  std::sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  uint64_t mass = 0;
  for (const Candidate& x : cand) mass += x.w;
  const uint64_t r =
      s::scale_to(s::random_word((uint64_t)in.control[sample_col::kSeed], (uint64_t)in.control[sample_col::kDraw]), mass);
  uint64_t cum = 0;
  for (const Candidate& x : cand) {
    cum += x.w;
    if (r < cum) return x.id;
  }
  return cand.back().id;  // unreachable: r < mass
}

}  // namespace

void CpuKernels::sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
                        const Tensor& bias, Tensor& out) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1), h = tokens.dim(1);
  const float* l = static_cast<const float*>(logits.data());
  const float* p = static_cast<const float*>(params.data());
  const int64_t* c = static_cast<const int64_t*>(control.data());
  const int32_t* t = static_cast<const int32_t*>(tokens.data());
  const float* b = static_cast<const float*>(bias.data());
  int32_t* dst = static_cast<int32_t*>(out.data());
  auto run = [&](int64_t r0, int64_t r1) {
    std::vector<float> work;
    std::vector<Candidate> cand;
    for (int64_t r = r0; r < r1; ++r) {
      const RowInputs in{l + r * vocab, vocab, p + r * kSampleParams, c + r * kSampleControls, t + r * h * 2,
                         b + r * h, h};
      dst[r] = sample_row(in, work, cand);
    }
  };
  if (rows == 1) {
    run(0, 1);
  } else {
    ThreadPool::global().parallel_for(rows, 1, run);
  }
}

}  // namespace rbee::cpu
