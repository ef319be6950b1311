// Internal helpers shared by the scheduler implementations (src/sd/scheduler_*.cpp).
#pragma once

#include <memory>
#include <vector>

#include "rbee/sd/scheduler.h"

namespace rbee::sd::detail {

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
// a * x + b * y
Tensor lincomb(double a, const Tensor& x, double b, const Tensor& y);

std::unique_ptr<Scheduler> make_euler(const NoiseSchedule& s, bool ancestral);
std::unique_ptr<Scheduler> make_ddim(const NoiseSchedule& s);
std::unique_ptr<Scheduler> make_dpmpp_2m(const NoiseSchedule& s);
std::unique_ptr<Scheduler> make_lcm(const NoiseSchedule& s);

}  // namespace rbee::sd::detail
