// PNDM's linear multistep part (PLMS, Liu et al. 2022), diffusers' PNDMScheduler with skip_prk_steps: timesteps
// "leading" t_k, run as [t(n-1), ..., t1, t1, t0] (n + 1 UNet evaluations: the second evaluation at t1 averages
// with the first to start the multistep history), then Adams-Bashforth combinations of up to four past noise
// predictions, each applied by the DDIM-like transfer _get_prev_sample. The UNet sees x_t unscaled.
#include <cmath>
#include <deque>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd::detail {
namespace {

class PndmScheduler final : public DiffusionScheduler {
 public:
  explicit PndmScheduler(const NoiseSchedule& s) : s_(s), acp_(alphas_cumprod(s)) {
    final_acp_ = s.set_alpha_to_one ? 1.0 : (double)acp_[0];
  }
  DiffusionSchedulerKind kind() const override { return DiffusionSchedulerKind::Pndm; }
  double init_noise_sigma() const override { return 1.0; }

  void set_timesteps(int steps) override {
    const int n = s_.num_train_timesteps;
    RBEE_CHECK(steps >= 1 && steps <= n, "scheduler pndm: steps {} outside [1, {}]", steps, n);
    const TimestepSpacing spacing = s_.has_spacing ? s_.spacing : TimestepSpacing::Leading;
    std::vector<double> base;  // ascending, as diffusers' _timesteps
    if (spacing == TimestepSpacing::Leading) {
      const int ratio = n / steps;
      for (int i = 0; i < steps; ++i) base.push_back((double)(i * ratio + s_.steps_offset));
    } else if (spacing == TimestepSpacing::Linspace) {
      const double step = steps > 1 ? (double)(n - 1) / (steps - 1) : 0.0;  // numpy's linspace: i * step
      for (int i = 0; i < steps; ++i) base.push_back(std::nearbyint(i * step));
    } else {
      const double ratio = (double)n / steps;
      for (int i = steps - 1; i >= 0; --i) base.push_back(std::nearbyint((double)n - i * ratio) - 1.0);
    }
    ratio_ = n / steps;
    // [t0 .. t(n-2), t(n-2), t(n-1)] reversed ([t0] for one step)
    std::vector<double> plms(base.begin(), base.end() - 1);
    if (base.size() >= 2) plms.push_back(base[base.size() - 2]);
    plms.push_back(base.back());
    timesteps_.assign(plms.rbegin(), plms.rend());
    sigmas_.clear();
    for (double t : timesteps_) {
      const float a = acp_[(size_t)t];
      sigmas_.push_back((double)std::sqrt((1.0f - a) / a));
    }
    sigmas_.push_back(0.0);
    ets_.clear();
    counter_ = 0;
    cur_sample_ = Tensor();
  }

  Tensor step(const Tensor& out, int i, const Tensor& x, const Tensor& noise) override {
    check_step(i, out, x);
    RBEE_CHECK(i == counter_, "scheduler pndm: step {} out of order (expected {})", i, counter_);
    int t = (int)timesteps_[(size_t)i];
    int prev_t = t - ratio_;
    if (counter_ != 1) {
      if (ets_.size() > 3) ets_.pop_front();
      ets_.push_back(out);
    } else {
      prev_t = t;
      t = t + ratio_;
    }
    Tensor eps, sample = x;
    const size_t m = ets_.size();
    if (m == 1 && counter_ == 0) {
      eps = out;
      cur_sample_ = x;
    } else if (m == 1 && counter_ == 1) {
      eps = lincomb(0.5, out, 0.5, ets_.back());
      sample = cur_sample_;
      cur_sample_ = Tensor();
    } else if (m == 2) {
      eps = lincomb(1.5, ets_[1], -0.5, ets_[0]);
    } else if (m == 3) {
      eps = ops::add(lincomb(23.0 / 12, ets_[2], -16.0 / 12, ets_[1]), ops::affine(ets_[0], 5.0 / 12, 0.0));
    } else {
      eps = ops::add(lincomb(55.0 / 24, ets_[3], -59.0 / 24, ets_[2]),
                     lincomb(37.0 / 24, ets_[1], -9.0 / 24, ets_[0]));
    }
    ++counter_;
    return prev_sample(sample, t, prev_t, eps);
  }

  Tensor add_noise(const Tensor& x0, const Tensor& noise, int i) const override {
    RBEE_CHECK(i >= 0 && i < steps(), "scheduler pndm: add_noise step {} outside [0, {})", i, steps());
    const double a = acp_[(size_t)timesteps_[(size_t)i]];
    return lincomb(std::sqrt(a), x0, std::sqrt(1.0 - a), noise);
  }

 private:
  // diffusers' _get_prev_sample (formula (9) of the PNDM paper), in f32 scalars as torch computes them.
  Tensor prev_sample(const Tensor& x, int t, int prev_t, Tensor eps) const {
    const double a_t = acp_[(size_t)t];
    const double a_prev = prev_t >= 0 ? (double)acp_[(size_t)prev_t] : final_acp_;
    const double b_t = 1.0 - a_t, b_prev = 1.0 - a_prev;
    if (s_.prediction_type == PredictionType::VPrediction) eps = lincomb(std::sqrt(a_t), eps, std::sqrt(b_t), x);
    const double sample_coeff = std::sqrt(a_prev / a_t);
    const double denom = a_t * std::sqrt(b_prev) + std::sqrt(a_t * b_t * a_prev);
    return lincomb(sample_coeff, x, -(a_prev - a_t) / denom, eps);
  }

  NoiseSchedule s_;
  std::vector<float> acp_;
  double final_acp_;
  int ratio_ = 1;
  std::deque<Tensor> ets_;
  int counter_ = 0;
  Tensor cur_sample_;
};

}  // namespace

std::unique_ptr<DiffusionScheduler> make_pndm(const NoiseSchedule& s) { return std::make_unique<PndmScheduler>(s); }

}  // namespace rbee::sd::detail
