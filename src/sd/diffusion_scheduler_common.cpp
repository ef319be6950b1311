// The training noise schedule shared by every scheduler, config parsing, and the scheduler factory.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/diffusion_scheduler.h"
#include "sd/diffusion_scheduler_impl.h"

namespace rbee::sd {

DiffusionSchedulerKind diffusion_scheduler_kind_from_name(std::string_view name) {
  if (name == "euler") return DiffusionSchedulerKind::Euler;
  if (name == "euler_a" || name == "euler_ancestral") return DiffusionSchedulerKind::EulerAncestral;
  if (name == "ddim") return DiffusionSchedulerKind::Ddim;
  if (name == "dpmpp_2m_karras" || name == "dpm++_2m_karras") return DiffusionSchedulerKind::DpmPP2MKarras;
  if (name == "dpmpp_2m" || name == "dpm++_2m") return DiffusionSchedulerKind::DpmPP2M;
  if (name == "lcm") return DiffusionSchedulerKind::Lcm;
  if (name == "heun") return DiffusionSchedulerKind::Heun;
  if (name == "pndm" || name == "plms") return DiffusionSchedulerKind::Pndm;
  if (name == "unipc") return DiffusionSchedulerKind::UniPC;
  if (name == "dpmpp_sde" || name == "dpm++_sde") return DiffusionSchedulerKind::DpmPPSde;
  RBEE_CHECK(false,
             "sampler: unknown name '{}' (euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_karras, lcm, heun, pndm, unipc, "
             "dpmpp_sde)",
             name);
  return DiffusionSchedulerKind::Euler;
}

const char* diffusion_scheduler_kind_name(DiffusionSchedulerKind kind) {
  switch (kind) {
    case DiffusionSchedulerKind::Euler: return "euler";
    case DiffusionSchedulerKind::EulerAncestral: return "euler_a";
    case DiffusionSchedulerKind::Ddim: return "ddim";
    case DiffusionSchedulerKind::DpmPP2MKarras: return "dpmpp_2m_karras";
    case DiffusionSchedulerKind::Lcm: return "lcm";
    case DiffusionSchedulerKind::DpmPP2M: return "dpmpp_2m";
    case DiffusionSchedulerKind::Heun: return "heun";
    case DiffusionSchedulerKind::Pndm: return "pndm";
    case DiffusionSchedulerKind::UniPC: return "unipc";
    case DiffusionSchedulerKind::DpmPPSde: return "dpmpp_sde";
  }
  return "?";
}

NoiseSchedule NoiseSchedule::from_json(const nlohmann::json& config) {
  RBEE_CHECK(config.is_object(), "scheduler config: expected a JSON object");
  // diffusers' from_config treats the keys listed in "_use_default_values" as absent (the class's defaults apply).
  nlohmann::json c = config;
  if (const auto it = config.find("_use_default_values"); it != config.end() && it->is_array()) {
    for (const auto& k : *it)
      if (k.is_string()) c.erase(k.get<std::string>());
  }
  NoiseSchedule s;
  for (auto it = c.begin(); it != c.end(); ++it)
    if (!it->is_null()) s.given.push_back(it.key());
  auto present = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto num = [&](const char* key, double fallback) {
    if (!present(key)) return fallback;
    RBEE_CHECK(c[key].is_number(), "scheduler config: '{}' must be a number", key);
    return c[key].get<double>();
  };
  auto str = [&](const char* key, const char* fallback) -> std::string {
    if (!present(key)) return fallback;
    RBEE_CHECK(c[key].is_string(), "scheduler config: '{}' must be a string", key);
    return c[key].get<std::string>();
  };
  auto boolean = [&](const char* key, bool fallback) {
    if (!present(key)) return fallback;
    RBEE_CHECK(c[key].is_boolean(), "scheduler config: '{}' must be true or false", key);
    return c[key].get<bool>();
  };
  // A field whose non-default value no implemented sampler honours: remembered, refused by the samplers reading it.
  auto unless_default = [&](const char* key, bool is_default) {
    if (present(key) && !is_default) s.unimplemented.emplace_back(key, c[key].dump());
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
  else if (bs == "squaredcos_cap_v2") s.beta_schedule = BetaSchedule::SquaredCosCapV2;
  else RBEE_CHECK(false, "scheduler config: unsupported beta_schedule '{}'", bs);
  if (present("trained_betas")) {
    const nlohmann::json& t = c["trained_betas"];
    RBEE_CHECK(t.is_array() && (int)t.size() == s.num_train_timesteps,
               "scheduler config: trained_betas must list num_train_timesteps = {} numbers", s.num_train_timesteps);
    for (const auto& v : t) {
      RBEE_CHECK(v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1,
                 "scheduler config: trained_betas entry {} outside [0, 1)", v.dump());
      s.trained_betas.push_back(v.get<double>());
    }
  }
  s.rescale_betas_zero_snr = boolean("rescale_betas_zero_snr", false);
  std::string pt = str("prediction_type", "epsilon");
  if (pt == "epsilon") s.prediction_type = PredictionType::Epsilon;
  else if (pt == "v_prediction") s.prediction_type = PredictionType::VPrediction;
  else RBEE_CHECK_CODE(false, ErrorCode::Unsupported, "scheduler config: prediction_type '{}' is not supported "
                       "(epsilon, v_prediction)", pt);
  s.steps_offset = (int)num("steps_offset", 0);
  s.set_alpha_to_one = boolean("set_alpha_to_one", false);
  if (present("timestep_spacing")) {
    std::string sp = str("timestep_spacing", "");
    s.has_spacing = true;
    if (sp == "linspace") s.spacing = TimestepSpacing::Linspace;
    else if (sp == "leading") s.spacing = TimestepSpacing::Leading;
    else if (sp == "trailing") s.spacing = TimestepSpacing::Trailing;
    else RBEE_CHECK(false, "scheduler config: unsupported timestep_spacing '{}'", sp);
  }
  s.lcm_original_inference_steps = (int)num("original_inference_steps", 50);
  RBEE_CHECK(s.lcm_original_inference_steps >= 1, "scheduler config: original_inference_steps must be positive");
  s.lcm_timestep_scaling = num("timestep_scaling", 10.0);
  s.use_karras_sigmas = boolean("use_karras_sigmas", false);
  s.sigma_min = num("sigma_min", 0.0);
  s.sigma_max = num("sigma_max", 0.0);
  RBEE_CHECK(s.sigma_min >= 0 && s.sigma_max >= 0, "scheduler config: sigma_min / sigma_max must not be negative");
  const std::string final_type = str("final_sigmas_type", "zero");
  RBEE_CHECK(final_type == "zero" || final_type == "sigma_min",
             "scheduler config: final_sigmas_type '{}' must be zero or sigma_min", final_type);
  s.final_sigma_min = final_type == "sigma_min";
  s.clip_sample = boolean("clip_sample", false);
  s.clip_sample_range = num("clip_sample_range", 1.0);
  s.lower_order_final = boolean("lower_order_final", true);
  s.euler_at_final = boolean("euler_at_final", false);
  s.solver_type = str("solver_type", "");
  s.solver_order = (int)num("solver_order", 2);
  s.skip_prk_steps = boolean("skip_prk_steps", false);

  unless_default("thresholding", !boolean("thresholding", false));
  unless_default("interpolation_type", str("interpolation_type", "linear") == "linear");
  unless_default("timestep_type", str("timestep_type", "discrete") == "discrete");
  unless_default("use_exponential_sigmas", !boolean("use_exponential_sigmas", false));
  unless_default("use_beta_sigmas", !boolean("use_beta_sigmas", false));
  unless_default("use_lu_lambdas", !boolean("use_lu_lambdas", false));
  unless_default("use_flow_sigmas", !boolean("use_flow_sigmas", false));
  unless_default("use_dynamic_shifting", !boolean("use_dynamic_shifting", false));
  unless_default("variance_type", !present("variance_type"));
  unless_default("lambda_min_clipped", !present("lambda_min_clipped") || !std::isfinite(num("lambda_min_clipped", 0)) ||
                                           num("lambda_min_clipped", 0) < -1e30);
  unless_default("disable_corrector", !present("disable_corrector") || (c["disable_corrector"].is_array() &&
                                                                         c["disable_corrector"].empty()));
  unless_default("shift_terminal", !present("shift_terminal"));
  return s;
}

bool NoiseSchedule::has(std::string_view key) const {
  return std::find(given.begin(), given.end(), key) != given.end();
}

std::vector<float> betas(const NoiseSchedule& s) {
  const int n = s.num_train_timesteps;
  std::vector<float> out((size_t)n);
  for (int i = 0; i < n; ++i) {
    double frac = (double)i / (double)(n - 1);
    if (!s.trained_betas.empty()) {
      out[(size_t)i] = (float)s.trained_betas[(size_t)i];
    } else if (s.beta_schedule == BetaSchedule::Linear) {
      out[(size_t)i] = (float)(s.beta_start + frac * (s.beta_end - s.beta_start));
    } else if (s.beta_schedule == BetaSchedule::ScaledLinear) {  // linspace of sqrt(beta) in f32, squared in f32
      float r = (float)(std::sqrt(s.beta_start) + frac * (std::sqrt(s.beta_end) - std::sqrt(s.beta_start)));
      out[(size_t)i] = r * r;
    } else {  // squaredcos_cap_v2: GLIDE's cosine schedule (betas_for_alpha_bar), capped at 0.999, in double
      auto alpha_bar = [](double t) {
        const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2);
        return c * c;
      };
      const double t1 = (double)i / n, t2 = (double)(i + 1) / n;
      out[(size_t)i] = (float)std::min(1.0 - alpha_bar(t2) / alpha_bar(t1), 0.999);
    }
  }
  if (s.rescale_betas_zero_snr) {
    // rescale_zero_terminal_snr in f32: shift sqrt(alpha_bar) so the last is 0, scale so the first is unchanged.
    std::vector<float> abs_((size_t)n);
    double prod = 1.0;  // torch's CPU cumprod accumulates in double
    for (int i = 0; i < n; ++i) {
      prod *= (double)(1.0f - out[(size_t)i]);
      abs_[(size_t)i] = std::sqrt((float)prod);
    }
    const float first = abs_.front(), last = abs_.back();
    const float scale = first / (first - last);
    std::vector<float> bar((size_t)n);
    for (int i = 0; i < n; ++i) {
      const float v = (abs_[(size_t)i] - last) * scale;
      bar[(size_t)i] = v * v;
    }
    for (int i = 0; i < n; ++i) out[(size_t)i] = 1.0f - (i == 0 ? bar[0] : bar[(size_t)i] / bar[(size_t)i - 1]);
  }
  return out;
}

std::vector<float> alphas_cumprod(const NoiseSchedule& s) {
  const std::vector<float> b = betas(s);
  std::vector<float> out(b.size());
  double prod = 1.0;  // torch's CPU cumprod accumulates in double, rounding each output to f32
  for (size_t i = 0; i < b.size(); ++i) {
    prod *= (double)(1.0f - b[i]);
    out[i] = (float)prod;
  }
  return out;
}

namespace detail {

std::vector<float> sigma_schedule_acp(const NoiseSchedule& s) {
  std::vector<float> acp = alphas_cumprod(s);
  if (s.rescale_betas_zero_snr) acp.back() = 1.0f / 16777216.0f;  // 2^-24
  return acp;
}

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

std::vector<double> multistep_timesteps(const NoiseSchedule& s, int steps) {
  const int n = s.num_train_timesteps;
  RBEE_CHECK(steps >= 1 && steps <= n, "scheduler: steps {} outside [1, {}]", steps, n);
  const TimestepSpacing spacing = s.has_spacing ? s.spacing : TimestepSpacing::Linspace;
  std::vector<double> t;
  if (spacing == TimestepSpacing::Linspace) {
    const double step = (double)(n - 1) / (double)steps;  // numpy's linspace: i * step
    for (int i = steps; i >= 1; --i) t.push_back(std::nearbyint((double)i * step));
  } else if (spacing == TimestepSpacing::Leading) {
    const int ratio = n / (steps + 1);
    for (int i = steps; i >= 1; --i) t.push_back((double)(i * ratio + s.steps_offset));
  } else {
    t = spaced_timesteps(s, TimestepSpacing::Trailing, steps);
  }
  return t;
}

double max_sigma_init_noise(const std::vector<double>& sigmas, TimestepSpacing spacing, std::string_view scheduler) {
  RBEE_CHECK(!sigmas.empty(), "scheduler {}: set_timesteps was not called", scheduler);
  const double m = *std::max_element(sigmas.begin(), sigmas.end());
  const float mf = (float)m;  // torch: f32 arithmetic on the f32 sigma
  if (spacing == TimestepSpacing::Leading) return (double)std::sqrt(mf * mf + 1.0f);
  return m;
}

Tensor scale_by_sigma(const Tensor& sample, double sigma) {
  return ops::affine(sample, 1.0 / std::sqrt(sigma * sigma + 1.0), 0.0);
}

Tensor sigma_x0(PredictionType type, const Tensor& x, const Tensor& out, double sigma) {
  if (type == PredictionType::Epsilon) return lincomb(1.0, x, -sigma, out);
  return lincomb(1.0 / (sigma * sigma + 1.0), x, -sigma / std::sqrt(sigma * sigma + 1.0), out);
}

Tensor lincomb(double a, const Tensor& x, double b, const Tensor& y) {
  return ops::add(ops::affine(x, a, 0.0), ops::affine(y, b, 0.0));
}

Tensor clamp_abs(const Tensor& x, double range) {
  Tensor lo = ops::full({1}, -range, x.dtype(), x.device()), hi = ops::full({1}, range, x.dtype(), x.device());
  return ops::binary(BinaryOp::Min, ops::binary(BinaryOp::Max, x, lo), hi);
}

}  // namespace detail

Tensor DiffusionScheduler::scale_model_input(const Tensor& sample, int step_index) const { return sample; }

void DiffusionScheduler::check_step(int step_index, const Tensor& model_output, const Tensor& sample) const {
  RBEE_CHECK(!timesteps_.empty(), "scheduler {}: set_timesteps was not called", diffusion_scheduler_kind_name(kind()));
  RBEE_CHECK(step_index >= 0 && step_index < steps(), "scheduler {}: step index {} outside [0, {})",
             diffusion_scheduler_kind_name(kind()), step_index, steps());
  RBEE_CHECK(model_output.shape() == sample.shape(), "scheduler {}: model output {} and sample {} differ in shape",
             diffusion_scheduler_kind_name(kind()), model_output.shape().to_string(), sample.shape().to_string());
}

NoiseSchedule NoiseSchedule::with_defaults_of(DiffusionSchedulerKind kind) const {
  NoiseSchedule s = *this;
  const bool lcm = kind == DiffusionSchedulerKind::Lcm,
             heun = kind == DiffusionSchedulerKind::Heun || kind == DiffusionSchedulerKind::DpmPPSde;
  if (!has("beta_start")) s.beta_start = lcm || heun ? 0.00085 : 0.0001;
  if (!has("beta_end")) s.beta_end = lcm || heun ? 0.012 : 0.02;
  if (!has("beta_schedule")) s.beta_schedule = lcm ? BetaSchedule::ScaledLinear : BetaSchedule::Linear;
  if (!has("set_alpha_to_one")) s.set_alpha_to_one = kind == DiffusionSchedulerKind::Ddim || lcm;
  if (!has("clip_sample")) s.clip_sample = kind == DiffusionSchedulerKind::Ddim;
  // DDIM, DPM++, Heun, Euler: linspace unless given; DDIM, LCM, PNDM: leading (each scheduler applies its default).
  return s;
}

int max_steps(DiffusionSchedulerKind kind, const NoiseSchedule& s) {
  if (kind == DiffusionSchedulerKind::Lcm) return std::min(s.lcm_original_inference_steps, s.num_train_timesteps);
  return s.num_train_timesteps;
}

namespace {

// The scheduler_config.json fields each diffusers scheduler class reads, among those rbee keeps in
// NoiseSchedule::unimplemented (non-default values not implemented here).
bool reads(DiffusionSchedulerKind kind, std::string_view key) {
  using K = DiffusionSchedulerKind;
  const bool euler = kind == K::Euler, dpm = kind == K::DpmPP2M || kind == K::DpmPP2MKarras, unipc = kind == K::UniPC;
  if (key == "interpolation_type" || key == "timestep_type") return euler;
  if (key == "thresholding") return kind == K::Ddim || kind == K::Lcm || dpm || unipc;
  if (key == "use_exponential_sigmas" || key == "use_beta_sigmas")
    return euler || dpm || kind == K::Heun || unipc || kind == K::DpmPPSde;
  if (key == "use_flow_sigmas" || key == "use_dynamic_shifting") return dpm || unipc;
  if (key == "use_lu_lambdas" || key == "variance_type" || key == "lambda_min_clipped") return dpm;
  if (key == "disable_corrector" || key == "shift_terminal") return unipc;
  return false;
}

}  // namespace

std::string unsupported_reason(DiffusionSchedulerKind kind, const NoiseSchedule& s) {
  for (const auto& [key, value] : s.unimplemented)
    if (reads(kind, key)) return fmt::format("scheduler config field {} = {} is not implemented", key, value);
  if (kind == DiffusionSchedulerKind::Pndm && !s.skip_prk_steps)
    return "scheduler config field skip_prk_steps is false (or absent): PNDM's Runge-Kutta warm-up steps are not "
           "implemented, only its linear multistep part (skip_prk_steps true, as SD 1.x configs say)";
  if (kind == DiffusionSchedulerKind::UniPC && s.solver_order != 2 && s.has("solver_order"))
    return fmt::format("scheduler config field solver_order = {} is not implemented (2)", s.solver_order);
  if (kind == DiffusionSchedulerKind::UniPC && !s.solver_type.empty() && s.solver_type != "bh1" &&
      s.solver_type != "bh2" && s.solver_type != "midpoint" && s.solver_type != "heun" && s.solver_type != "logrho")
    return fmt::format("scheduler config field solver_type = \"{}\" is not implemented (bh1, bh2)", s.solver_type);
  const bool dpm = kind == DiffusionSchedulerKind::DpmPP2M || kind == DiffusionSchedulerKind::DpmPP2MKarras;
  if (dpm && !s.solver_type.empty() && s.solver_type != "midpoint" && s.solver_type != "logrho" &&
      s.solver_type != "bh1" && s.solver_type != "bh2")  // diffusers maps the UniPC names to midpoint
    return fmt::format("scheduler config field solver_type = \"{}\" is not implemented (midpoint)", s.solver_type);
  return "";
}

std::unique_ptr<DiffusionScheduler> make_diffusion_scheduler(DiffusionSchedulerKind kind, const NoiseSchedule& given) {
  const std::string why = unsupported_reason(kind, given);
  RBEE_CHECK_CODE(why.empty(), ErrorCode::Unsupported, "scheduler {}: {}", diffusion_scheduler_kind_name(kind), why);
  const NoiseSchedule schedule = given.with_defaults_of(kind);
  switch (kind) {
    case DiffusionSchedulerKind::Euler: return detail::make_euler(schedule, false);
    case DiffusionSchedulerKind::EulerAncestral: return detail::make_euler(schedule, true);
    case DiffusionSchedulerKind::Ddim: return detail::make_ddim(schedule);
    case DiffusionSchedulerKind::DpmPP2MKarras: return detail::make_dpmpp_2m(schedule, true);
    case DiffusionSchedulerKind::DpmPP2M: return detail::make_dpmpp_2m(schedule, false);
    case DiffusionSchedulerKind::Heun: return detail::make_heun(schedule);
    case DiffusionSchedulerKind::Pndm: return detail::make_pndm(schedule);
    case DiffusionSchedulerKind::UniPC: return detail::make_unipc(schedule);
    case DiffusionSchedulerKind::DpmPPSde: return detail::make_dpmpp_sde(schedule);
    case DiffusionSchedulerKind::Lcm: return detail::make_lcm(schedule);
  }
  RBEE_CHECK(false, "scheduler: unknown kind {}", (int)kind);
  return nullptr;
}

}  // namespace rbee::sd
