// DDIM (Song et al. 2021), deterministic (eta = 0), in the variance-preserving parametrization:
// x_t = sqrt(acp_t) x0 + sqrt(1 - acp_t) eps; the UNet sees x_t unscaled.
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class DdimScheduler final : public DiffusionScheduler {
 public:
  explicit DdimScheduler(const NoiseSchedule& s) : s_(s), acp_(alphas_cumprod(s)) {
    final_acp_ = s.set_alpha_to_one ? 1.0 : (double)acp_[0];
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::Ddim; }
  double init_noise_sigma() const override { return 1.0; }

  void set_timesteps(int steps) override {
    TimestepSpacing spacing = s_.has_spacing ? s_.spacing : TimestepSpacing::Leading;
    std::vector<double> t = spaced_timesteps(s_, spacing, steps);
    if (spacing == TimestepSpacing::Linspace)
      for (double& v : t) v = std::nearbyint(v);
    for (double v : t)
      RBEE_CHECK(v >= 0 && v < s_.num_train_timesteps, "scheduler ddim: timestep {} outside [0, {}) for {} steps",
                 v, s_.num_train_timesteps, steps);
    timesteps_ = t;
    sigmas_.clear();
    for (int i = 0; i <= steps; ++i) {
      double a = i < steps ? acp_at_index(i) : acp_prev(steps - 1);
      sigmas_.push_back((double)std::sqrt((1.0f - (float)a) / (float)a));
    }
  }

  Tensor step(const Tensor& eps, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, eps, x);
    double a_t = acp_at_index(i), a_prev = acp_prev(i);
    double b_t = 1.0 - a_t;
    Tensor x0, e;
    if (s_.prediction_type == PredictionType::Epsilon) {
      x0 = lincomb(1.0 / std::sqrt(a_t), x, -std::sqrt(b_t) / std::sqrt(a_t), eps);
      e = eps;
    } else {
      x0 = lincomb(std::sqrt(a_t), x, -std::sqrt(b_t), eps);
      e = lincomb(std::sqrt(a_t), eps, std::sqrt(b_t), x);
    }
    if (s_.clip_sample) x0 = clamp_abs(x0, s_.clip_sample_range);
    return lincomb(std::sqrt(a_prev), x0, std::sqrt(1.0 - a_prev), e);
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler ddim: add_noise step {} outside [0, {})", i, steps());
    double a = acp_at_index(i);
    return lincomb(std::sqrt(a), x0, std::sqrt(1.0 - a), noise);
  }

 private:
  double acp_at_index(int i) const { return (double)acp_[(size_t)timesteps_[(size_t)i]]; }
  // The target of step i: diffusers' previous timestep t_i - num_train / steps, the final alpha when negative.
  double acp_prev(int i) const {
    int t = (int)timesteps_[(size_t)i] - s_.num_train_timesteps / steps();
    return t >= 0 ? (double)acp_[(size_t)t] : final_acp_;
  }

  NoiseSchedule s_;
  std::vector<float> acp_;
  double final_acp_;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_ddim(const NoiseSchedule& s) { return std::make_unique<DdimScheduler>(s); }

}  // namespace rbee::sd::detail
