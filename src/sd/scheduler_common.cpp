// The training noise schedule shared by every scheduler, config parsing, and the scheduler factory.
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/scheduler.h"
#include "sd/scheduler_impl.h"

namespace rbee::sd {

SchedulerKind scheduler_kind_from_name(std::string_view name) {
  if (name == "euler") return SchedulerKind::Euler;
  if (name == "euler_a" || name == "euler_ancestral") return SchedulerKind::EulerAncestral;
  if (name == "ddim") return SchedulerKind::Ddim;
  if (name == "dpmpp_2m_karras" || name == "dpm++_2m_karras") return SchedulerKind::DpmPP2MKarras;
  if (name == "lcm") return SchedulerKind::Lcm;
  RBEE_CHECK(false, "sampler: unknown name '{}' (euler, euler_a, ddim, dpmpp_2m_karras, lcm)", name);
  return SchedulerKind::Euler;
}

const char* scheduler_kind_name(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::Euler: return "euler";
    case SchedulerKind::EulerAncestral: return "euler_a";
    case SchedulerKind::Ddim: return "ddim";
    case SchedulerKind::DpmPP2MKarras: return "dpmpp_2m_karras";
    case SchedulerKind::Lcm: return "lcm";
  }
  return "?";
}

NoiseSchedule NoiseSchedule::from_json(const nlohmann::json& c) {
  RBEE_CHECK(c.is_object(), "scheduler config: expected a JSON object");
  NoiseSchedule s;
  auto num = [&](const char* key, double fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    RBEE_CHECK(c[key].is_number(), "scheduler config: '{}' must be a number", key);
    return c[key].get<double>();
  };
  auto str = [&](const char* key, const char* fallback) -> std::string {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    RBEE_CHECK(c[key].is_string(), "scheduler config: '{}' must be a string", key);
    return c[key].get<std::string>();
  };
  s.num_train_timesteps = (int)num("num_train_timesteps", 1000);
  RBEE_CHECK(s.num_train_timesteps >= 2 && s.num_train_timesteps <= 100000,
             "scheduler config: num_train_timesteps {} outside [2, 100000]", s.num_train_timesteps);
  s.beta_start = num("beta_start", 0.0001);
  s.beta_end = num("beta_end", 0.02);
  RBEE_CHECK(s.beta_start > 0 && s.beta_end < 1 && s.beta_start <= s.beta_end,
             "scheduler config: betas [{}, {}] must satisfy 0 < beta_start <= beta_end < 1", s.beta_start,
             s.beta_end);
  std::string bs = str("beta_schedule", "linear");
  if (bs == "linear") s.beta_schedule = BetaSchedule::Linear;
  else if (bs == "scaled_linear") s.beta_schedule = BetaSchedule::ScaledLinear;
  else RBEE_CHECK(false, "scheduler config: unsupported beta_schedule '{}'", bs);
  std::string pt = str("prediction_type", "epsilon");
  if (pt == "epsilon") s.prediction_type = PredictionType::Epsilon;
  else if (pt == "v_prediction") s.prediction_type = PredictionType::VPrediction;
  else RBEE_CHECK(false, "scheduler config: unsupported prediction_type '{}'", pt);
  s.steps_offset = (int)num("steps_offset", 0);
  if (c.contains("set_alpha_to_one") && c["set_alpha_to_one"].is_boolean())
    s.set_alpha_to_one = c["set_alpha_to_one"].get<bool>();
  if (c.contains("timestep_spacing") && c["timestep_spacing"].is_string()) {
    std::string sp = c["timestep_spacing"].get<std::string>();
    s.has_spacing = true;
    if (sp == "linspace") s.spacing = TimestepSpacing::Linspace;
    else if (sp == "leading") s.spacing = TimestepSpacing::Leading;
    else if (sp == "trailing") s.spacing = TimestepSpacing::Trailing;
    else RBEE_CHECK(false, "scheduler config: unsupported timestep_spacing '{}'", sp);
  }
  s.lcm_original_inference_steps = (int)num("original_inference_steps", 50);
  s.lcm_timestep_scaling = num("timestep_scaling", 10.0);
  return s;
}

std::vector<float> alphas_cumprod(const NoiseSchedule& s) {
  const int n = s.num_train_timesteps;
  std::vector<float> out((size_t)n);
  float prod = 1.0f;
  for (int i = 0; i < n; ++i) {
    double frac = (double)i / (double)(n - 1);
    float beta;
    if (s.beta_schedule == BetaSchedule::Linear) {
      beta = (float)(s.beta_start + frac * (s.beta_end - s.beta_start));
    } else {  // linspace of sqrt(beta) in f32, squared in f32
      float r = (float)(std::sqrt(s.beta_start) + frac * (std::sqrt(s.beta_end) - std::sqrt(s.beta_start)));
      beta = r * r;
    }
    prod *= 1.0f - beta;
    out[(size_t)i] = prod;
  }
  return out;
}

namespace detail {

std::vector<double> sigmas_of(const std::vector<float>& acp) {
  std::vector<double> s(acp.size());
  for (size_t i = 0; i < acp.size(); ++i) s[i] = (double)std::sqrt((1.0f - acp[i]) / acp[i]);
  return s;
}

double interp(double x, const std::vector<double>& ys) {
  if (x <= 0) return ys.front();
  double last = (double)(ys.size() - 1);
  if (x >= last) return ys.back();
  size_t lo = (size_t)std::floor(x);
  double w = x - (double)lo;
  return ys[lo] + w * (ys[lo + 1] - ys[lo]);
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n) {
  const double rho = 7.0;
  double min_inv = std::pow(sigma_min, 1.0 / rho), max_inv = std::pow(sigma_max, 1.0 / rho);
  std::vector<double> out((size_t)n);
  for (int i = 0; i < n; ++i) {
    double ramp = n == 1 ? 0.0 : (double)i / (double)(n - 1);
    out[(size_t)i] = std::pow(max_inv + ramp * (min_inv - max_inv), rho);
  }
  return out;
}

double sigma_to_t(double sigma, const std::vector<double>& log_sigmas) {
  double ls = std::log(std::max(sigma, 1e-10));
  const int n = (int)log_sigmas.size();
  // The last index whose log sigma is <= ls (0 when none), kept below n - 1.
  int low = 0;
  for (int i = 0; i < n; ++i)
    if (ls - log_sigmas[(size_t)i] >= 0) low = i;
  low = std::min(low, n - 2);
  double lo = log_sigmas[(size_t)low], hi = log_sigmas[(size_t)low + 1];
  double w = std::clamp((lo - ls) / (lo - hi), 0.0, 1.0);
  return (1 - w) * low + w * (low + 1);
}

std::vector<double> spaced_timesteps(const NoiseSchedule& s, TimestepSpacing spacing, int steps) {
  const int n = s.num_train_timesteps;
  RBEE_CHECK(steps >= 1 && steps <= n, "scheduler: steps {} outside [1, {}]", steps, n);
  std::vector<double> t((size_t)steps);
  switch (spacing) {
    case TimestepSpacing::Linspace:
      for (int i = 0; i < steps; ++i) {
        double v = steps == 1 ? 0.0 : (double)(n - 1) * (double)i / (double)(steps - 1);
        t[(size_t)(steps - 1 - i)] = (double)(float)v;
      }
      break;
    case TimestepSpacing::Leading: {
      int ratio = n / steps;
      for (int i = 0; i < steps; ++i) t[(size_t)(steps - 1 - i)] = (double)(i * ratio + s.steps_offset);
      break;
    }
    case TimestepSpacing::Trailing: {
      double ratio = (double)n / steps;
      for (int i = 0; i < steps; ++i) t[(size_t)i] = std::nearbyint((double)n - i * ratio) - 1.0;
      break;
    }
  }
  return t;
}

Tensor lincomb(double a, const Tensor& x, double b, const Tensor& y) {
  return ops::add(ops::affine(x, a, 0.0), ops::affine(y, b, 0.0));
}

}  // namespace detail

Tensor Scheduler::scale_model_input(const Tensor& sample, int step_index) const { return sample; }

void Scheduler::check_step(int step_index, const Tensor& model_output, const Tensor& sample) const {
  RBEE_CHECK(!timesteps_.empty(), "scheduler {}: set_timesteps was not called", scheduler_kind_name(kind()));
  RBEE_CHECK(step_index >= 0 && step_index < steps(), "scheduler {}: step index {} outside [0, {})",
             scheduler_kind_name(kind()), step_index, steps());
  RBEE_CHECK(model_output.shape() == sample.shape(), "scheduler {}: model output {} and sample {} differ in shape",
             scheduler_kind_name(kind()), model_output.shape().to_string(), sample.shape().to_string());
}

std::unique_ptr<Scheduler> make_scheduler(SchedulerKind kind, const NoiseSchedule& schedule) {
  switch (kind) {
    case SchedulerKind::Euler: return detail::make_euler(schedule, false);
    case SchedulerKind::EulerAncestral: return detail::make_euler(schedule, true);
    case SchedulerKind::Ddim: return detail::make_ddim(schedule);
    case SchedulerKind::DpmPP2MKarras: return detail::make_dpmpp_2m(schedule);
    case SchedulerKind::Lcm: return detail::make_lcm(schedule);
  }
  RBEE_CHECK(false, "scheduler: unknown kind {}", (int)kind);
  return nullptr;
}

}  // namespace rbee::sd
