// UniPC (Zhao et al. 2023), diffusers' UniPCMultistepScheduler with its defaults: solver_order 2, data prediction
// (predict_x0), B(h) of solver_type bh2 (expm1) or bh1 (h): at each step the corrector UniC refines the sample the
// previous predictor made, using the model output at that sample, then the predictor UniP (order 2 after the first
// step, order 1 at the first and, with lower_order_final, at the last) moves to the next noise level. Timesteps as
// DPM-Solver++ (multistep_timesteps, or Karras sigmas); the UNet sees x_t unscaled.
#include <cmath>
#include <limits>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

struct Level {
  double alpha, sigma, lambda;  // alpha_t = 1 / sqrt(s^2 + 1), sigma_t = s * alpha_t, lambda = log alpha - log sigma
};
Level level(double s) {
  const double a = 1.0 / std::sqrt(s * s + 1.0), sg = s * a;
  return {a, sg, sg > 0 ? std::log(a) - std::log(sg) : std::numeric_limits<double>::infinity()};
}

class UniPcScheduler final : public DiffusionScheduler {
 public:
  explicit UniPcScheduler(const NoiseSchedule& s) : s_(s), train_sigmas_(sigmas_of(sigma_schedule_acp(s))) {
    for (double v : train_sigmas_) log_sigmas_.push_back((double)std::log((float)v));
    bh1_ = s.solver_type == "bh1";
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::UniPC; }
  double init_noise_sigma() const override { return 1.0; }

  void set_timesteps(int steps) override {
    timesteps_.clear();
    sigmas_.clear();
    if (s_.use_karras_sigmas) {
      const double lo = s_.sigma_min > 0 ? s_.sigma_min : train_sigmas_.front();
      const double hi = s_.sigma_max > 0 ? s_.sigma_max : train_sigmas_.back();
      std::vector<double> k = karras_sigmas(lo, hi, steps);
      for (double sg : k) {
        timesteps_.push_back(std::nearbyint(sigma_to_t(sg, log_sigmas_)));
        sigmas_.push_back((double)(float)sg);
      }
      sigmas_.push_back(s_.final_sigma_min ? sigmas_.back() : 0.0);
    } else {
      timesteps_ = multistep_timesteps(s_, steps);
      for (double t : timesteps_) sigmas_.push_back((double)(float)interp(t, train_sigmas_));
      sigmas_.push_back(s_.final_sigma_min ? (double)(float)train_sigmas_.front() : 0.0);
    }
    outputs_[0] = outputs_[1] = last_sample_ = Tensor();
    lower_order_nums_ = 0;
    this_order_ = 1;
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    const Level cur = level(sigmas_[(size_t)i]);
    Tensor x0 = s_.prediction_type == PredictionType::Epsilon ? lincomb(1.0 / cur.alpha, x, -cur.sigma / cur.alpha, out)
                                                              : lincomb(cur.alpha, x, -cur.sigma, out);
    Tensor sample = x;
    if (i > 0 && last_sample_.defined()) sample = corrector(i, x0);
    outputs_[0] = outputs_[1];
    outputs_[1] = x0;
    int order = s_.lower_order_final ? std::min(2, steps() - i) : 2;
    this_order_ = std::min(order, lower_order_nums_ + 1);
    last_sample_ = sample;
    Tensor next = predictor(i, sample);
    if (lower_order_nums_ < 2) ++lower_order_nums_;
    return next;
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler unipc: add_noise step {} outside [0, {})", i, steps());
    const Level l = level(sigmas_[(size_t)i]);
    return lincomb(l.alpha, x0, l.sigma, noise);
  }

 private:
  // h phi_1 = expm1(-h), B(h), and the coefficients b_1, b_2 of diffusers' R / b system for hh = -h.
  struct Coeffs {
    double h_phi_1, B_h, b1, b2;
  };
  Coeffs coeffs(double h) const {
    const double hh = -h;
    Coeffs c;
    c.h_phi_1 = std::expm1(hh);
    c.B_h = bh1_ ? hh : std::expm1(hh);
    const double k1 = c.h_phi_1 / hh - 1.0;
    c.b1 = k1 / c.B_h;
    const double k2 = k1 / hh - 0.5;
    c.b2 = k2 * 2.0 / c.B_h;
    return c;
  }

  // UniP from sigma_i to sigma_(i+1) with this_order_ (rhos_p = 0.5 at order 2, as diffusers).
  Tensor predictor(int i, const Tensor& x) const {
    const Level t = level(sigmas_[(size_t)i + 1]), s0 = level(sigmas_[(size_t)i]);
    const double h = t.lambda - s0.lambda;
    const Coeffs c = coeffs(h);
    const Tensor& m0 = outputs_[1];
    Tensor xt = lincomb(t.sigma / s0.sigma, x, -t.alpha * c.h_phi_1, m0);
    if (this_order_ == 2) {
      const double rk = (level(sigmas_[(size_t)i - 1]).lambda - s0.lambda) / h;
      Tensor d1 = lincomb(1.0 / rk, outputs_[0], -1.0 / rk, m0);  // (m_prev - m0) / rk
      xt = ops::add(xt, ops::affine(d1, -t.alpha * c.B_h * 0.5, 0.0));
    }
    return xt;
  }

  // UniC: refines the sample x_t that the last predictor made (from last_sample_), with model_t = x0 at x_t.
  Tensor corrector(int i, const Tensor& model_t) const {
    const Level t = level(sigmas_[(size_t)i]), s0 = level(sigmas_[(size_t)i - 1]);
    const double h = t.lambda - s0.lambda;
    const Coeffs c = coeffs(h);
    const Tensor& m0 = outputs_[1];
    Tensor xt = lincomb(t.sigma / s0.sigma, last_sample_, -t.alpha * c.h_phi_1, m0);
    Tensor d1t = ops::sub(model_t, m0);
    if (this_order_ == 1) return ops::add(xt, ops::affine(d1t, -t.alpha * c.B_h * 0.5, 0.0));
    // order 2: rhos_c = solve([[1, 1], [rk, 1]], [b1, b2])
    const double rk = (level(sigmas_[(size_t)i - 2]).lambda - s0.lambda) / h;
    const double rho0 = (c.b1 - c.b2) / (1.0 - rk), rho1 = c.b1 - rho0;
    Tensor d1 = lincomb(1.0 / rk, outputs_[0], -1.0 / rk, m0);
    Tensor corr = lincomb(rho0, d1, rho1, d1t);
    return ops::add(xt, ops::affine(corr, -t.alpha * c.B_h, 0.0));
  }

  NoiseSchedule s_;
  std::vector<double> train_sigmas_, log_sigmas_;
  bool bh1_ = false;
  Tensor outputs_[2];  // the x0 predictions of the last two steps, oldest first
  Tensor last_sample_;
  int lower_order_nums_ = 0, this_order_ = 1;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_unipc(const NoiseSchedule& s) { return std::make_unique<UniPcScheduler>(s); }

}  // namespace rbee::sd::detail
