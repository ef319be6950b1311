// LCM (latent consistency models, Luo et al. 2023): each step predicts x0 with the consistency boundary
// scalings, then re-noises it to the next timestep with fresh noise (the last step returns the prediction).
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class LcmScheduler final : public DiffusionScheduler {
 public:
  explicit LcmScheduler(const NoiseSchedule& s) : s_(s), acp_(alphas_cumprod(s)) {
    final_acp_ = s.set_alpha_to_one ? 1.0 : (double)acp_[0];
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::Lcm; }
  double init_noise_sigma() const override { return 1.0; }
  bool needs_noise() const override { return true; }
  bool needs_noise_at(int i) const override { return i != steps() - 1; }

  // The distillation grid holds `original` timesteps k-1, 2k-1, ..., N-1 (k = N / original); `steps` of them are
  // picked evenly from the top.
  void set_timesteps(int steps) override {
    const int original = s_.lcm_original_inference_steps;
    RBEE_CHECK(original >= 1 && original <= s_.num_train_timesteps,
               "scheduler lcm: original_inference_steps {} outside [1, {}]", original, s_.num_train_timesteps);
    RBEE_CHECK(steps >= 1 && steps <= original, "scheduler lcm: steps {} outside [1, {}]", steps, original);
    const int k = s_.num_train_timesteps / original;
    std::vector<int> grid;
    for (int i = original; i >= 1; --i) grid.push_back(i * k - 1);
    timesteps_.clear();
    for (int i = 0; i < steps; ++i) {
      int idx = (int)std::floor((double)original * i / steps);
      timesteps_.push_back((double)grid[(size_t)idx]);
    }
    sigmas_.clear();
    for (int i = 0; i <= steps; ++i) {
      float a = (float)(i < steps ? acp_at(i) : acp_prev(steps - 1));
      sigmas_.push_back((double)std::sqrt((1.0f - a) / a));
    }
  }

  Tensor step(const Tensor& eps, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, eps, x);
    double a_t = acp_at(i), b_t = 1.0 - a_t;
    double st = timesteps_[(size_t)i] * s_.lcm_timestep_scaling;
    const double sigma_data = 0.5;
    double c_skip = sigma_data * sigma_data / (st * st + sigma_data * sigma_data);
    double c_out = st / std::sqrt(st * st + sigma_data * sigma_data);
    Tensor x0 = s_.prediction_type == PredictionType::Epsilon
                    ? lincomb(1.0 / std::sqrt(a_t), x, -std::sqrt(b_t) / std::sqrt(a_t), eps)
                    : lincomb(std::sqrt(a_t), x, -std::sqrt(b_t), eps);
    if (s_.clip_sample) x0 = clamp_abs(x0, s_.clip_sample_range);
    Tensor denoised = lincomb(c_out, x0, c_skip, x);
    if (i == steps() - 1) return denoised;
    RBEE_CHECK(noise.defined() && noise.shape() == x.shape(), "scheduler lcm: step {} needs a noise tensor of shape {}",
               i, x.shape().to_string());
    double a_prev = acp_prev(i);
    return lincomb(std::sqrt(a_prev), denoised, std::sqrt(1.0 - a_prev), noise);
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler lcm: add_noise step {} outside [0, {})", i, steps());
    double a = acp_at(i);
    return lincomb(std::sqrt(a), x0, std::sqrt(1.0 - a), noise);
  }

 private:
  double acp_at(int i) const { return (double)acp_[(size_t)timesteps_[(size_t)i]]; }
  // The next timestep of the list (the same one after the last step).
  double acp_prev(int i) const {
    int t = (int)timesteps_[(size_t)std::min(i + 1, steps() - 1)];
    return t >= 0 ? (double)acp_[(size_t)t] : final_acp_;
  }

  NoiseSchedule s_;
  std::vector<float> acp_;
  double final_acp_;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_lcm(const NoiseSchedule& s) { return std::make_unique<LcmScheduler>(s); }

}  // namespace rbee::sd::detail
