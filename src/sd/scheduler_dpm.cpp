// DPM-Solver++(2M) (Lu et al. 2022) on Karras sigmas, in the data-prediction form: the model output is turned
// into an x0 estimate, the first and last steps are first order, the others use the previous x0 (midpoint rule).
// Variance-preserving latents: the UNet sees x_t unscaled; x_t = alpha_t x0 + sigma_t eps with
// alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma * alpha_t.
#include <cmath>
#include <limits>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/scheduler_impl.h"

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

class DpmPP2MScheduler final : public Scheduler {
 public:
  explicit DpmPP2MScheduler(const NoiseSchedule& s) : s_(s), train_sigmas_(sigmas_of(alphas_cumprod(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back(std::log(v));
  }
  SchedulerKind kind() const override { return SchedulerKind::DpmPP2MKarras; }
  double init_noise_sigma() const override { return 1.0; }

  void set_timesteps(int steps) override {
    RBEE_CHECK(steps >= 1 && steps <= s_.num_train_timesteps, "scheduler dpmpp_2m_karras: steps {} outside [1, {}]",
               steps, s_.num_train_timesteps);
    std::vector<double> k = karras_sigmas(train_sigmas_.front(), train_sigmas_.back(), steps);
    timesteps_.clear();
    sigmas_.clear();
    for (double sg : k) {
      timesteps_.push_back(std::nearbyint(sigma_to_t(sg, log_sigmas_)));
      sigmas_.push_back((double)(float)sg);
    }
    sigmas_.push_back(0.0);
    prev_x0_ = Tensor();
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    AlphaSigma s0 = alpha_sigma(sigmas_[(size_t)i]), t = alpha_sigma(sigmas_[(size_t)i + 1]);
    Tensor x0 = s_.prediction_type == PredictionType::Epsilon ? lincomb(1.0 / s0.alpha, x, -s0.sigma / s0.alpha, out)
                                                              : lincomb(s0.alpha, x, -s0.sigma, out);
    double h = t.lambda - s0.lambda;
    double em1 = std::exp(-h) - 1.0;  // -1 at the final sigma 0
    bool first_order = i == 0 || i == steps() - 1 || !prev_x0_.defined();
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
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler dpmpp_2m_karras: add_noise step {} outside [0, {})", i, steps());
    AlphaSigma a = alpha_sigma(sigmas_[(size_t)i]);
    return lincomb(a.alpha, x0, a.sigma, noise);
  }

 private:
  NoiseSchedule s_;
  std::vector<double> train_sigmas_, log_sigmas_;
  Tensor prev_x0_;
};

}  // namespace

std::unique_ptr<Scheduler> make_dpmpp_2m(const NoiseSchedule& s) { return std::make_unique<DpmPP2MScheduler>(s); }

}  // namespace rbee::sd::detail
