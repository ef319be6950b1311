// Diffusion schedulers (the samplers of the SD pipelines), following the definitions of diffusers' schedulers
// so that timesteps, sigmas and update rules are the same numbers for the same configuration.
//
// A scheduler is configured once (NoiseSchedule, from a model's scheduler_config.json), then set_timesteps(n)
// fixes the n timesteps of one run. The denoising loop is, for i in [0, n):
//   model_in = scale_model_input(x, i); eps = unet(model_in, timesteps()[i]); x = step(eps, i, x, noise_i)
// starting from x = initial_noise * init_noise_sigma(). Schedulers that inject noise (needs_noise()) take a
// fresh standard-normal tensor of x's shape at every step; the others ignore it. The scheduler keeps the state
// multistep methods need (DPM++ 2M keeps the previous x0 prediction), so one scheduler serves one run at a time.
//
// Not to be confused with rbee::llm::Scheduler (rbee/llm/scheduler.h), the LLM worker's job batcher. The worker
// API and the CLI call a diffusion scheduler a `sampler`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"

namespace rbee::sd {

enum class DiffusionSchedulerKind {
  Euler, EulerAncestral, Ddim, DpmPP2MKarras, Lcm, DpmPP2M, Heun, Pndm, UniPC, DpmPPSde
};
// "euler", "euler_a", "ddim", "dpmpp_2m", "dpmpp_2m_karras", "lcm", "heun", "pndm", "unipc", "dpmpp_sde" (the names
// the worker's `sampler` field takes).
DiffusionSchedulerKind diffusion_scheduler_kind_from_name(std::string_view name);
const char* diffusion_scheduler_kind_name(DiffusionSchedulerKind kind);

enum class PredictionType { Epsilon, VPrediction };
enum class BetaSchedule { Linear, ScaledLinear, SquaredCosCapV2 };
// How n inference timesteps are picked from the training timesteps (diffusers' `timestep_spacing`).
enum class TimestepSpacing { Linspace, Leading, Trailing };

// The training noise schedule and prediction type (diffusers' scheduler_config.json fields). A model folder's
// config is written for one scheduler class; rbee's sampler X uses it as diffusers' XScheduler.from_config does:
// each field X reads takes effect, or X is refused (unsupported_reason) naming the field; a field absent from the
// config takes X's own default (with_defaults_of).
struct NoiseSchedule {
  int num_train_timesteps = 1000;
  double beta_start = 0.00085;
  double beta_end = 0.012;
  BetaSchedule beta_schedule = BetaSchedule::ScaledLinear;
  std::vector<double> trained_betas;  // non-empty: these betas (num_train_timesteps of them) instead
  bool rescale_betas_zero_snr = false;  // zero terminal SNR (Lin et al. 2023, algorithm 1)
  PredictionType prediction_type = PredictionType::Epsilon;
  int steps_offset = 1;          // added to "leading" timesteps
  bool set_alpha_to_one = false;  // DDIM / LCM: alpha_cumprod of the step after the last
  // Unset: each scheduler's own default (Euler, Euler a, DPM++: linspace; DDIM, LCM: leading).
  bool has_spacing = false;
  TimestepSpacing spacing = TimestepSpacing::Linspace;
  int lcm_original_inference_steps = 50;  // LCM: the distillation's timestep grid
  double lcm_timestep_scaling = 10.0;
  bool use_karras_sigmas = false;  // Euler (and the other sigma schedulers): Karras et al. noise levels
  double sigma_min = 0, sigma_max = 0;  // > 0: the ends of the Karras ramp instead of the schedule's
  bool final_sigma_min = false;         // final_sigmas_type "sigma_min" (else "zero")
  bool clip_sample = false;             // DDIM / LCM: clamp the x0 prediction to +-clip_sample_range
  double clip_sample_range = 1.0;
  // DPM-Solver++ and UniPC: lower_order_final, euler_at_final; solver_type as given ("" when absent).
  bool lower_order_final = true, euler_at_final = false;
  std::string solver_type;
  int solver_order = 2;
  bool skip_prk_steps = false;  // PNDM: false runs Runge-Kutta warm-up steps (not implemented: refused)
  // Fields read by some scheduler classes whose non-default values rbee does not implement, by key (e.g.
  // "thresholding", "solver_type"); unsupported_reason refuses a sampler that reads one of them.
  std::vector<std::pair<std::string, std::string>> unimplemented;  // (key, value as JSON)
  // The keys present in the config (so that with_defaults_of can fill in the absent ones).
  std::vector<std::string> given;

  // Reads the fields above from a scheduler_config.json object; fields no scheduler reads are ignored, values that
  // no scheduler accepts throw.
  static NoiseSchedule from_json(const nlohmann::json& config);
  bool has(std::string_view key) const;
  // This schedule with the fields absent from the config set to `kind`'s defaults in diffusers (betas: Euler, DDIM,
  // DPM++ 0.0001..0.02 linear; LCM 0.00085..0.012 scaled_linear; set_alpha_to_one and clip_sample: DDIM true).
  NoiseSchedule with_defaults_of(DiffusionSchedulerKind kind) const;
};

// betas[t] (after rescale_betas_zero_snr) and alphas_cumprod[t] for t < num_train_timesteps, in f32 as diffusers
// computes them (the cumulative product in double, as torch's CPU cumprod, rounded to f32). With
// rescale_betas_zero_snr the last alphas_cumprod is 0: schedulers in the sigma parametrization replace it by 2^-24,
// as diffusers does.
std::vector<float> betas(const NoiseSchedule& schedule);
std::vector<float> alphas_cumprod(const NoiseSchedule& schedule);

class DiffusionScheduler {
 public:
  virtual ~DiffusionScheduler() = default;
  virtual DiffusionSchedulerKind kind() const = 0;
  // Fixes the timesteps of one run and resets the multistep state. Throws InvalidArgument for steps < 1 or
  // more steps than the scheduler can place.
  virtual void set_timesteps(int steps) = 0;
  // diffusers' `order`: UNet evaluations per inference step for img2img's start index (Heun: 2).
  virtual int order() const { return 1; }
  // The timestep passed to the UNet at each step (fractional for Euler with linspace spacing). steps() counts UNet
  // evaluations: n inference steps are 2n - 1 of them for Heun, n + 1 for PNDM.
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
  // Whether step `step_index` draws noise (diffusers' schedulers skip the draw at some steps, e.g. LCM's last);
  // a torch-ordered generator must draw exactly then.
  virtual bool needs_noise_at(int step_index) const {
    (void)step_index;
    return needs_noise();
  }
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

std::unique_ptr<DiffusionScheduler> make_diffusion_scheduler(DiffusionSchedulerKind kind,
                                                             const NoiseSchedule& schedule);

// The most inference steps `kind` can place with `schedule` (LCM: original_inference_steps; the others:
// num_train_timesteps).
int max_steps(DiffusionSchedulerKind kind, const NoiseSchedule& schedule);
// Why `kind` cannot run with `schedule` (a config field diffusers' scheduler of that kind reads and rbee does
// not implement), or "" when it can.
std::string unsupported_reason(DiffusionSchedulerKind kind, const NoiseSchedule& schedule);

}  // namespace rbee::sd
