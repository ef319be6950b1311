// Internal helpers shared by the scheduler implementations (src/sd/diffusion_scheduler_*.cpp).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "rbee/sd/diffusion_scheduler.h"

namespace rbee::sd::detail {

// alphas_cumprod for the schedulers in the sigma parametrization (Euler, Euler a, DPM++, UniPC): with
// rescale_betas_zero_snr the last value is 2^-24 instead of 0, so that the largest sigma is finite (as diffusers).
std::vector<float> sigma_schedule_acp(const NoiseSchedule& s);
// sigma[t] = sqrt((1 - acp[t]) / acp[t]), in f32 as diffusers computes it.
std::vector<double> sigmas_of(const std::vector<float>& acp);
// Linear interpolation of ys at fractional index x (clamped to the ends), as np.interp on an index grid.
double interp(double x, const std::vector<double>& ys);
// Karras et al. (2022) noise levels: n values from sigma_max down to sigma_min, rho = 7.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n);
// The fractional training timestep whose log sigma equals log(sigma), interpolating log_sigmas (increasing).
double sigma_to_t(double sigma, const std::vector<double>& log_sigmas);
// `steps` training timesteps, largest first, for a spacing.
std::vector<double> spaced_timesteps(const NoiseSchedule& s, TimestepSpacing spacing, int steps);
// The integer timesteps of diffusers' multistep solvers (DPMSolverMultistep, UniPC) without Karras sigmas:
// linspace over [0, n - 1] with steps + 1 points, rounded, the last dropped; leading with ratio n / (steps + 1);
// trailing as the others.
std::vector<double> multistep_timesteps(const NoiseSchedule& s, int steps);
// init_noise_sigma of the sigma-parametrized schedulers (Euler, Heun, DPM++ SDE): the largest of `sigmas`, or
// sqrt(sigma^2 + 1) of it with leading spacing, in f32 as torch computes it on the f32 sigma. Names `scheduler` in
// the error when set_timesteps was not called (sigmas empty).
double max_sigma_init_noise(const std::vector<double>& sigmas, TimestepSpacing spacing, std::string_view scheduler);
// The model input of a sigma-parametrized step: sample / sqrt(sigma^2 + 1).
Tensor scale_by_sigma(const Tensor& sample, double sigma);
// The denoised sample the model output `out` predicts for sample x at noise level sigma (sigma parametrization):
// x - sigma * out for epsilon prediction, x / (sigma^2 + 1) - sigma / sqrt(sigma^2 + 1) * out for v-prediction.
Tensor sigma_x0(PredictionType type, const Tensor& x, const Tensor& out, double sigma);
// a * x + b * y
Tensor lincomb(double a, const Tensor& x, double b, const Tensor& y);
// x clamped to [-range, range] (clip_sample).
Tensor clamp_abs(const Tensor& x, double range);

std::unique_ptr<DiffusionScheduler> make_euler(const NoiseSchedule& s, bool ancestral);
std::unique_ptr<DiffusionScheduler> make_ddim(const NoiseSchedule& s);
std::unique_ptr<DiffusionScheduler> make_dpmpp_2m(const NoiseSchedule& s, bool karras);
std::unique_ptr<DiffusionScheduler> make_lcm(const NoiseSchedule& s);
std::unique_ptr<DiffusionScheduler> make_heun(const NoiseSchedule& s);
std::unique_ptr<DiffusionScheduler> make_pndm(const NoiseSchedule& s);
std::unique_ptr<DiffusionScheduler> make_unipc(const NoiseSchedule& s);
std::unique_ptr<DiffusionScheduler> make_dpmpp_sde(const NoiseSchedule& s);

}  // namespace rbee::sd::detail
