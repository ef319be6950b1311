// DPM-Solver++ SDE (k-diffusion's sample_dpmpp_sde, eta 1, r = 1/2), diffusers' DPMSolverSDEScheduler: each step
// goes to the midpoint (in t = -log sigma) with an ancestral update, evaluates the UNet there, and redoes the step
// from the start with that estimate, adding noise scaled by sigma_up after each half; the UNet runs 2n - 1 times:
// timesteps [t0, mid0, t1, mid1, ..., t(n-1)], sigmas [s0, s1, s1, ..., s(n-1), s(n-1), 0]. The noise of every
// evaluation but the last is a fresh standard normal here; diffusers draws it from torchsde's Brownian tree, which
// rbee does not reproduce (so NoiseKind::Torch is refused for this sampler).
#include <algorithm>
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class DpmSdeScheduler final : public DiffusionScheduler {
 public:
  explicit DpmSdeScheduler(const NoiseSchedule& s) : s_(s), train_sigmas_(sigmas_of(alphas_cumprod(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back((double)std::log((float)v));
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::DpmPPSde; }
  int order() const override { return 2; }
  bool needs_noise() const override { return true; }
  bool needs_noise_at(int i) const override { return i < steps() - 1; }

  void set_timesteps(int steps) override {
    const int n = s_.num_train_timesteps;
    RBEE_CHECK(steps >= 1 && steps <= n, "scheduler dpmpp_sde: steps {} outside [1, {}]", steps, n);
    const TimestepSpacing spacing = s_.has_spacing ? s_.spacing : TimestepSpacing::Linspace;
    std::vector<double> t;
    if (spacing == TimestepSpacing::Linspace) {  // float64 here (np.linspace(..., dtype=float))
      const double step = steps > 1 ? (double)(n - 1) / (steps - 1) : 0.0;
      for (int i = steps - 1; i >= 0; --i) t.push_back(i * step);
    } else {
      t = spaced_timesteps(s_, spacing, steps);
    }
    std::vector<double> sig;
    for (double v : t) sig.push_back(interp(v, train_sigmas_));
    if (s_.use_karras_sigmas) {
      sig = karras_sigmas(sig.back(), sig.front(), steps);
      for (int i = 0; i < steps; ++i) t[(size_t)i] = sigma_to_t(sig[(size_t)i], log_sigmas_);
    }
    timesteps_.assign(1, t[0]);
    sigmas_.assign(1, (double)(float)sig[0]);
    for (int i = 1; i < steps; ++i) {
      // the midpoint between levels i - 1 and i: sigma = exp(-(t + (t_next - t) / 2)), its fractional timestep
      const double mid = std::exp(-(-std::log(sig[(size_t)i - 1]) +
                                    0.5 * (std::log(sig[(size_t)i - 1]) - std::log(sig[(size_t)i]))));
      timesteps_.push_back(sigma_to_t(mid, log_sigmas_));
      timesteps_.push_back(t[(size_t)i]);
      sigmas_.insert(sigmas_.end(), 2, (double)(float)sig[(size_t)i]);
    }
    sigmas_.push_back(0.0);
    spacing_ = spacing;
    first_sample_ = Tensor();
  }

  // sigmas_ hold f32 values.
  double init_noise_sigma() const override { return max_sigma_init_noise(sigmas_, spacing_, "dpmpp_sde"); }

  Tensor scale_model_input(const Tensor& sample, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler dpmpp_sde: step index {} outside [0, {})", i, steps());
    return scale_by_sigma(sample, i % 2 == 0 ? sigmas_[(size_t)i] : midpoint(i));
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    const bool first = i % 2 == 0;
    const double sigma = first ? sigmas_[(size_t)i] : sigmas_[(size_t)i - 1];
    const double sigma_next = first ? sigmas_[(size_t)i + 1] : sigmas_[(size_t)i];
    const double t = -std::log(sigma);
    const double si = first ? sigma : midpoint(i);
    Tensor x0 = sigma_x0(s_.prediction_type, x, out, si);
    if (sigma_next == 0.0) {  // Euler to 0: x + (x - x0) / sigma * (0 - sigma)
      const double dt = -sigma;
      return lincomb(1.0 + dt / sigma, x, -dt / sigma, x0);
    }
    const double t_next = first ? t + 0.5 * (-std::log(sigma_next) - t) : -std::log(sigma_next);
    Tensor sample = first ? x : first_sample_;
    RBEE_CHECK(sample.defined(), "scheduler dpmpp_sde: second half of step {} without its first", i);
    const double from = std::exp(-t), to = std::exp(-t_next);
    const double up = std::min(to, std::sqrt(to * to * (from * from - to * to) / (from * from)));
    const double down = std::sqrt(to * to - up * up);
    const double anc_t = -std::log(down);
    Tensor next = lincomb(down / from, sample, -std::expm1(t - anc_t), x0);
    RBEE_CHECK(noise.defined() && noise.shape() == x.shape(), "scheduler dpmpp_sde: step {} needs a noise tensor of "
               "shape {}", i, x.shape().to_string());
    next = ops::add(next, ops::affine(noise, up, 0.0));
    first_sample_ = first ? x : Tensor();
    return next;
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler dpmpp_sde: add_noise step {} outside [0, {})", i, steps());
    return lincomb(1.0, x0, sigmas_[(size_t)i], noise);
  }

 private:
  // The midpoint sigma of the step whose second half is evaluation i (odd): sqrt(sigma_(i-1) * sigma_i).
  double midpoint(int i) const {
    const double a = sigmas_[(size_t)i - 1], b = sigmas_[(size_t)i];
    return std::exp(-(-std::log(a) + 0.5 * (std::log(a) - std::log(b))));
  }

  NoiseSchedule s_;
  std::vector<double> train_sigmas_, log_sigmas_;
  TimestepSpacing spacing_ = TimestepSpacing::Linspace;
  Tensor first_sample_;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_dpmpp_sde(const NoiseSchedule& s) {
  return std::make_unique<DpmSdeScheduler>(s);
}

}  // namespace rbee::sd::detail
