// The standard acceptance rule of speculative sampling (speculative.h).
#include <algorithm>

#include "rbee/core/error.h"
#include "rbee/llm/speculative.h"

namespace rbee::llm {

TokenId draw_from(std::span<const float> probs, double u) {
  RBEE_CHECK(!probs.empty(), "draw_from: empty distribution");
  double total = 0;
  for (float v : probs) total += v;
  const double target = u * total;
  double cum = 0;
  TokenId last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = (TokenId)i;
    if (target < cum) return last;
  }
  RBEE_CHECK(last >= 0, "draw_from: the distribution has no mass");
  return last;
}

Verification verify_sampled(std::span<const std::vector<float>> p, std::span<const std::vector<float>> q,
                            std::span<const TokenId> drafts, const std::function<double()>& uniform) {
  const size_t k = drafts.size();
  RBEE_CHECK(p.size() == k + 1 && q.size() == k, "verify_sampled: {} drafts need {} target and {} draft rows, got {} and {}",
             k, k + 1, k, p.size(), q.size());
  Verification v;
  for (size_t i = 0; i < k; ++i) {
    const std::vector<float>& pi = p[i];
    const std::vector<float>& qi = q[i];
    RBEE_CHECK(pi.size() == qi.size(), "verify_sampled: row {} has {} target and {} draft probabilities", i, pi.size(),
               qi.size());
    const TokenId d = drafts[i];
    RBEE_CHECK(d >= 0 && (size_t)d < pi.size(), "verify_sampled: draft token {} outside [0, {})", d, pi.size());
    const double pd = pi[(size_t)d], qd = qi[(size_t)d];
    // q(d) > 0 since d was drawn from q; a draft q gave no mass (a caller's bug) is never accepted.
    const double u = uniform();
    if (qd > 0 && u * qd < pd) {  // u < min(1, p/q) without dividing
      v.accepted++;
      continue;
    }
    std::vector<float> residual(pi.size());
    double mass = 0;
    for (size_t t = 0; t < pi.size(); ++t) {
      residual[t] = std::max(0.0f, pi[t] - qi[t]);
      mass += residual[t];
    }
    // p <= q everywhere only when p == q (both sum to 1), where rejection has probability 0; rounding may still
    // get here: fall back to p itself.
    v.token = mass > 0 ? draw_from(residual, uniform()) : draw_from(pi, uniform());
    return v;
  }
  v.token = draw_from(p[k], uniform());
  return v;
}

}  // namespace rbee::llm
