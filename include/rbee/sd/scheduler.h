// Diffusion schedulers (the samplers of the SD pipelines), following the definitions of diffusers' schedulers
// so that timesteps, sigmas and update rules are the same numbers for the same configuration.
//
// A scheduler is configured once (NoiseSchedule, from a model's scheduler_config.json), then set_timesteps(n)
// fixes the n timesteps of one run. The denoising loop is, for i in [0, n):
//   model_in = scale_model_input(x, i); eps = unet(model_in, timesteps()[i]); x = step(eps, i, x, noise_i)
// starting from x = initial_noise * init_noise_sigma(). Schedulers that inject noise (needs_noise()) take a
// fresh standard-normal tensor of x's shape at every step; the others ignore it. The scheduler keeps the state
// multistep methods need (DPM++ 2M keeps the previous x0 prediction), so one scheduler serves one run at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"

namespace rbee::sd {

enum class SchedulerKind { Euler, EulerAncestral, Ddim, DpmPP2MKarras, Lcm };
// "euler", "euler_a", "ddim", "dpmpp_2m_karras", "lcm" (the names the worker's `sampler` field takes).
SchedulerKind scheduler_kind_from_name(std::string_view name);
const char* scheduler_kind_name(SchedulerKind kind);

enum class PredictionType { Epsilon, VPrediction };
enum class BetaSchedule { Linear, ScaledLinear };
// How n inference timesteps are picked from the training timesteps (diffusers' `timestep_spacing`).
enum class TimestepSpacing { Linspace, Leading, Trailing };

// The training noise schedule and prediction type (diffusers' scheduler_config.json fields).
struct NoiseSchedule {
  int num_train_timesteps = 1000;
  double beta_start = 0.00085;
  double beta_end = 0.012;
  BetaSchedule beta_schedule = BetaSchedule::ScaledLinear;
  PredictionType prediction_type = PredictionType::Epsilon;
  int steps_offset = 1;          // added to "leading" timesteps
  bool set_alpha_to_one = false;  // DDIM / LCM: alpha_cumprod of the step after the last
  // Unset: each scheduler's own default (Euler, Euler a, DPM++: linspace; DDIM, LCM: leading).
  bool has_spacing = false;
  TimestepSpacing spacing = TimestepSpacing::Linspace;
  int lcm_original_inference_steps = 50;  // LCM: the distillation's timestep grid
  double lcm_timestep_scaling = 10.0;

  // Reads the fields above from a scheduler_config.json object; unknown fields are ignored, bad values throw.
  static NoiseSchedule from_json(const nlohmann::json& config);
};

// alphas_cumprod[t] for t < num_train_timesteps, computed in f32 as diffusers does.
std::vector<float> alphas_cumprod(const NoiseSchedule& schedule);

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual SchedulerKind kind() const = 0;
  // Fixes the timesteps of one run and resets the multistep state. Throws InvalidArgument for steps < 1 or
  // more steps than the scheduler can place.
  virtual void set_timesteps(int steps) = 0;
  // The timestep passed to the UNet at each step (fractional for Euler with linspace spacing).
  const std::vector<double>& timesteps() const { return timesteps_; }
  // Noise levels sigma = sqrt((1 - alpha_cumprod) / alpha_cumprod): n + 1 values (the last is the level after
  // the final step, 0 for Euler and DPM++). DDIM and LCM have no sigma schedule of their own: theirs are the
  // sigmas of their timesteps, then of the final alpha.
  const std::vector<double>& sigmas() const { return sigmas_; }
  int steps() const { return (int)timesteps_.size(); }
  // Multiplies the initial standard-normal latent.
  virtual double init_noise_sigma() const = 0;
  // The UNet input for step i (Euler-family schedulers divide by sqrt(sigma^2 + 1); others return sample).
  virtual Tensor scale_model_input(const Tensor& sample, int step_index) const;
  virtual bool needs_noise() const { return false; }
  // x_{i+1} from the model output at step i (F32 tensors of one shape). `noise` must be defined when
  // needs_noise() and this step injects noise.
  virtual Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, const Tensor& noise) = 0;
  // img2img: the noisy latent at step `step_index`'s noise level: x0 and noise mixed as the scheduler's
  // add_noise does.
  virtual Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const = 0;

 protected:
  void check_step(int step_index, const Tensor& model_output, const Tensor& sample) const;
  std::vector<double> timesteps_;
  std::vector<double> sigmas_;
};

std::unique_ptr<Scheduler> make_scheduler(SchedulerKind kind, const NoiseSchedule& schedule);

}  // namespace rbee::sd
