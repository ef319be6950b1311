// Euler and Euler ancestral (Karras et al. 2022, k-diffusion's samplers) in the sigma parametrization:
// x = x0 + sigma * eps, the UNet sees x / sqrt(sigma^2 + 1).
#include <algorithm>
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class EulerScheduler final : public DiffusionScheduler {
 public:
  EulerScheduler(const NoiseSchedule& s, bool ancestral)
      : s_(s), ancestral_(ancestral), train_sigmas_(sigmas_of(sigma_schedule_acp(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back((double)std::log((float)v));  // numpy: log of f32 sigmas
  }

  DiffusionSchedulerKind kind() const override {
    return ancestral_ ? DiffusionSchedulerKind::EulerAncestral : DiffusionSchedulerKind::Euler;
  }
  bool needs_noise() const override { return ancestral_; }

  void set_timesteps(int steps) override {
    TimestepSpacing spacing = s_.has_spacing ? s_.spacing : TimestepSpacing::Linspace;
    timesteps_ = spaced_timesteps(s_, spacing, steps);
    std::vector<double> sig;
    for (double t : timesteps_) sig.push_back(interp(t, train_sigmas_));
    if (s_.use_karras_sigmas && !ancestral_) {
      // diffusers' _convert_to_karras of the spaced sigmas (config sigma_min / sigma_max override the ends), and
      // the fractional timesteps of those noise levels.
      const double lo = s_.sigma_min > 0 ? s_.sigma_min : sig.back(), hi = s_.sigma_max > 0 ? s_.sigma_max : sig.front();
      sig = karras_sigmas(lo, hi, steps);
      for (int i = 0; i < steps; ++i) timesteps_[(size_t)i] = (double)(float)sigma_to_t(sig[(size_t)i], log_sigmas_);
    }
    sigmas_.clear();
    for (double v : sig) sigmas_.push_back((double)(float)v);
    sigmas_.push_back(s_.final_sigma_min && !ancestral_ ? (double)(float)train_sigmas_.front() : 0.0);
    spacing_ = spacing;
  }

  double init_noise_sigma() const override { return max_sigma_init_noise(sigmas_, spacing_, "euler"); }

  Tensor scale_model_input(const Tensor& sample, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler euler: step index {} outside [0, {})", i, steps());
    return scale_by_sigma(sample, sigmas_[(size_t)i]);
  }

  Tensor step(const Tensor& eps, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, eps, x);
    double sigma = sigmas_[(size_t)i], sigma_next = sigmas_[(size_t)i + 1];
    const Tensor x0 = sigma_x0(s_.prediction_type, x, eps, sigma);
    // derivative d = (x - x0) / sigma; x_next = x + d * (target - sigma)
    double target = sigma_next, sigma_up = 0.0;
    if (ancestral_) {
      sigma_up = std::sqrt(sigma_next * sigma_next * (sigma * sigma - sigma_next * sigma_next) / (sigma * sigma));
      target = std::sqrt(sigma_next * sigma_next - sigma_up * sigma_up);
    }
    double dt = target - sigma;
    Tensor next = lincomb(1.0 + dt / sigma, x, -dt / sigma, x0);
    if (ancestral_ && sigma_up > 0.0) {
      RBEE_CHECK(noise.defined() && noise.shape() == x.shape(),
                 "scheduler euler_a: step {} needs a noise tensor of shape {}", i, x.shape().to_string());
      next = ops::add(next, ops::affine(noise, sigma_up, 0.0));
    }
    return next;
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler euler: add_noise step {} outside [0, {})", i, steps());
    return lincomb(1.0, x0, sigmas_[(size_t)i], noise);
  }

 private:
  NoiseSchedule s_;
  bool ancestral_;
  std::vector<double> train_sigmas_, log_sigmas_;
  TimestepSpacing spacing_ = TimestepSpacing::Linspace;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_euler(const NoiseSchedule& s, bool ancestral) {
  return std::make_unique<EulerScheduler>(s, ancestral);
}

}  // namespace rbee::sd::detail
