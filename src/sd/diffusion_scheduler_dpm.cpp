// DPM-Solver++(2M) (Lu et al. 2022), diffusers' DPMSolverMultistepScheduler with algorithm_type dpmsolver++,
// solver_order 2, solver_type midpoint: on Karras sigmas (dpmpp_2m_karras) or on the spaced timesteps' own sigmas
// (dpmpp_2m), in the data-prediction form: the model output is turned into an x0 estimate, the first step is first
// order, the others use the previous x0 (midpoint rule); the last step is first order when the final sigma is 0
// (final_sigmas_type "zero"), or with euler_at_final, or lower_order_final with fewer than 15 steps.
// Variance-preserving latents: the UNet sees x_t unscaled; x_t = alpha_t x0 + sigma_t eps with
// alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma * alpha_t.
#include <cmath>
#include <limits>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

struct AlphaSigma {
  double alpha, sigma, lambda;  // lambda = log(alpha) - log(sigma) (+inf at sigma = 0)
};
AlphaSigma alpha_sigma(double sigma) {
  double a = 1.0 / std::sqrt(sigma * sigma + 1.0), s = sigma * a;
  double lambda = s > 0 ? std::log(a) - std::log(s) : std::numeric_limits<double>::infinity();
  return {a, s, lambda};
}

class DpmPP2MScheduler final : public DiffusionScheduler {
 public:
  DpmPP2MScheduler(const NoiseSchedule& s, bool karras)
      : s_(s), karras_(karras), train_sigmas_(sigmas_of(sigma_schedule_acp(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back((double)std::log((float)v));  // numpy: log of f32 sigmas
  }
  DiffusionSchedulerKind kind() const override {
    return karras_ ? DiffusionSchedulerKind::DpmPP2MKarras : DiffusionSchedulerKind::DpmPP2M;
  }
  double init_noise_sigma() const override { return 1.0; }

  void set_timesteps(int steps) override {
    const int n = s_.num_train_timesteps;
    RBEE_CHECK(steps >= 1 && steps <= n, "scheduler {}: steps {} outside [1, {}]",
               diffusion_scheduler_kind_name(kind()), steps, n);
    timesteps_.clear();
    sigmas_.clear();
    if (karras_) {
      std::vector<double> k = karras_sigmas(train_sigmas_.front(), train_sigmas_.back(), steps);
      for (double sg : k) {
        double t = sigma_to_t(sg, log_sigmas_);
        timesteps_.push_back(s_.beta_schedule == BetaSchedule::SquaredCosCapV2 ? std::trunc(t) : std::nearbyint(t));
        sigmas_.push_back((double)(float)sg);
      }
    } else {
      timesteps_ = multistep_timesteps(s_, steps);
      for (double t : timesteps_) sigmas_.push_back((double)(float)interp(t, train_sigmas_));
    }
    sigmas_.push_back(s_.final_sigma_min ? (double)(float)train_sigmas_.front() : 0.0);
    prev_x0_ = Tensor();
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    AlphaSigma s0 = alpha_sigma(sigmas_[(size_t)i]), t = alpha_sigma(sigmas_[(size_t)i + 1]);
    Tensor x0 = s_.prediction_type == PredictionType::Epsilon ? lincomb(1.0 / s0.alpha, x, -s0.sigma / s0.alpha, out)
                                                              : lincomb(s0.alpha, x, -s0.sigma, out);
    double h = t.lambda - s0.lambda;
    double em1 = std::exp(-h) - 1.0;  // -1 at the final sigma 0
    const bool last = i == steps() - 1;
    const bool lower_final = last && (s_.euler_at_final || (s_.lower_order_final && steps() < 15) ||
                                      !s_.final_sigma_min);
    bool first_order = i == 0 || lower_final || !prev_x0_.defined();
    Tensor d = x0;
    if (!first_order) {
      AlphaSigma s1 = alpha_sigma(sigmas_[(size_t)i - 1]);
      double r0 = (s0.lambda - s1.lambda) / h;
      // D = x0 + 0.5 * (x0 - prev) / r0
      d = lincomb(1.0 + 0.5 / r0, x0, -0.5 / r0, prev_x0_);
    }
    prev_x0_ = x0;
    return lincomb(t.sigma / s0.sigma, x, -t.alpha * em1, d);
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler {}: add_noise step {} outside [0, {})",
               diffusion_scheduler_kind_name(kind()), i, steps());
    AlphaSigma a = alpha_sigma(sigmas_[(size_t)i]);
    return lincomb(a.alpha, x0, a.sigma, noise);
  }

 private:
  NoiseSchedule s_;
  bool karras_;
  std::vector<double> train_sigmas_, log_sigmas_;
  Tensor prev_x0_;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_dpmpp_2m(const NoiseSchedule& s, bool karras) {
  return std::make_unique<DpmPP2MScheduler>(s, karras);
}

}  // namespace rbee::sd::detail
