// Heun's method (Karras et al. 2022, algorithm 1 without churn), diffusers' HeunDiscreteScheduler: every step but
// the last is an Euler step to the next noise level followed by a correction with the model evaluated there, so
// the run evaluates the UNet 2n - 1 times: timesteps [t0, t1, t1, t2, t2, ..., t(n-1), t(n-1)], sigmas
// [s0, s1, s1, ..., s(n-1), s(n-1), 0]. The UNet sees x / sqrt(sigma^2 + 1).
#include <algorithm>
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class HeunScheduler final : public DiffusionScheduler {
 public:
  explicit HeunScheduler(const NoiseSchedule& s) : s_(s), train_sigmas_(sigmas_of(alphas_cumprod(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back((double)std::log((float)v));
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::Heun; }
  int order() const override { return 2; }

  void set_timesteps(int steps) override {
    const TimestepSpacing spacing = s_.has_spacing ? s_.spacing : TimestepSpacing::Linspace;
    std::vector<double> t = spaced_timesteps(s_, spacing, steps);
    std::vector<double> sig;
    for (double v : t) sig.push_back(interp(v, train_sigmas_));
    if (s_.use_karras_sigmas) {
      sig = karras_sigmas(sig.back(), sig.front(), steps);
      for (int i = 0; i < steps; ++i) t[(size_t)i] = (double)(float)sigma_to_t(sig[(size_t)i], log_sigmas_);
    }
    timesteps_.assign(1, t[0]);
    sigmas_.assign(1, (double)(float)sig[0]);
    for (int i = 1; i < steps; ++i) {
      timesteps_.insert(timesteps_.end(), 2, t[(size_t)i]);
      sigmas_.insert(sigmas_.end(), 2, (double)(float)sig[(size_t)i]);
    }
    sigmas_.push_back(0.0);
    spacing_ = spacing;
    prev_derivative_ = Tensor();
  }

  // sigmas_ hold f32 values.
  double init_noise_sigma() const override { return max_sigma_init_noise(sigmas_, spacing_, "heun"); }

  Tensor scale_model_input(const Tensor& sample, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler heun: step index {} outside [0, {})", i, steps());
    return scale_by_sigma(sample, sigmas_[(size_t)i]);
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    // Odd indices are the corrections (diffusers' state_in_first_order is false there).
    const bool first = i % 2 == 0;
    const double sigma = first ? sigmas_[(size_t)i] : sigmas_[(size_t)i - 1];
    const double sigma_next = first ? sigmas_[(size_t)i + 1] : sigmas_[(size_t)i];
    const double s_in = first ? sigma : sigma_next;
    Tensor x0 = sigma_x0(s_.prediction_type, x, out, s_in);
    if (s_.clip_sample) x0 = clamp_abs(x0, s_.clip_sample_range);
    if (first) {
      Tensor d = lincomb(1.0 / sigma, x, -1.0 / sigma, x0);  // (x - x0) / sigma
      dt_ = sigma_next - sigma;
      prev_derivative_ = d;
      prev_sample_ = x;
      return ops::add(x, ops::affine(d, dt_, 0.0));
    }
    RBEE_CHECK(prev_derivative_.defined(), "scheduler heun: correction step {} without its Euler step", i);
    Tensor d = lincomb(1.0 / sigma_next, x, -1.0 / sigma_next, x0);
    Tensor avg = lincomb(0.5, prev_derivative_, 0.5, d);
    Tensor next = ops::add(prev_sample_, ops::affine(avg, dt_, 0.0));
    prev_derivative_ = Tensor();
    prev_sample_ = Tensor();
    return next;
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler heun: add_noise step {} outside [0, {})", i, steps());
    return lincomb(1.0, x0, sigmas_[(size_t)i], noise);
  }

 private:
  NoiseSchedule s_;
  std::vector<double> train_sigmas_, log_sigmas_;
  TimestepSpacing spacing_ = TimestepSpacing::Linspace;
  Tensor prev_derivative_, prev_sample_;
  double dt_ = 0;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_heun(const NoiseSchedule& s) { return std::make_unique<HeunScheduler>(s); }

}  // namespace rbee::sd::detail
