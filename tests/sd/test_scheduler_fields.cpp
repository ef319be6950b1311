// Samplers built from scheduler configs with fields away from SD 1.5's (tools/goldens/make_sd_scheduler_field_goldens.py):
// each case is diffusers' <Class>.from_config(SD 1.5 config + fields) against make_diffusion_scheduler(kind,
// NoiseSchedule::from_json(the same config)): rescale_betas_zero_snr, use_karras_sigmas on Euler (with sigma_min /
// sigma_max), final_sigmas_type, clip_sample, trained_betas, squaredcos_cap_v2, the schedulers' own defaults of absent
// fields, DPM++ 2M without Karras sigmas in every spacing; and the samplers Heun, PNDM, UniPC and DPM++ SDE (its
// Brownian noise replaced by recorded draws). Tolerances as test_schedulers.cpp: integer timesteps equal,
// fractional ones and sigmas within 2e-6 relative, the 4-step loops within 1e-5 + 1e-5 * max |ref| (zero-SNR loops
// 1e-4, see below). Then the fields that are refused, each naming itself.
#include <cmath>
#include <fstream>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/diffusion_scheduler.h"
#include "sd/config_json.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::sd_data;

const nlohmann::json& goldens() {
  static nlohmann::json j = safetensors::read_json_file(sd_data("scheduler_fields.json"));
  return j;
}

nlohmann::json config_of(const nlohmann::json& c, const char* prediction) {
  nlohmann::json cfg = goldens()["config"];
  cfg["prediction_type"] = prediction;
  for (auto it = c["fields"].begin(); it != c["fields"].end(); ++it) {
    if (it->is_null()) cfg.erase(it.key());
    else cfg[it.key()] = *it;
  }
  if (c["trained_betas"].get<bool>()) cfg["trained_betas"] = goldens()["trained_betas"];
  return cfg;
}

TEST(SdSchedulerFields, SequencesMatchDiffusers) {
  ASSERT_GE(goldens()["cases"].size(), 20u);
  for (const auto& c : goldens()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    auto sched = make_diffusion_scheduler(diffusion_scheduler_kind_from_name(c["sampler"].get<std::string>()),
                                NoiseSchedule::from_json(config_of(c, "epsilon")));
    sched->set_timesteps(c["steps"].get<int>());
    const auto& ts = c["timesteps"];
    ASSERT_EQ(sched->timesteps().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const double want = ts[i].get<double>();
      if (want == std::floor(want)) EXPECT_EQ(sched->timesteps()[i], want) << "timestep " << i;
      else EXPECT_NEAR(sched->timesteps()[i], want, 2e-6 * want) << "timestep " << i;
    }
    const double init = c["init_noise_sigma"].get<double>();
    EXPECT_NEAR(sched->init_noise_sigma(), init, 2e-6 * init);
    const bool full = c.contains("sigmas");
    const auto& sg = full ? c["sigmas"] : c["sigmas_at_timesteps"];
    ASSERT_EQ(sched->sigmas().size(), full ? sg.size() : sg.size() + 1);
    for (size_t i = 0; i < sg.size(); ++i) {
      if (sg[i].is_null()) {  // infinite (zero terminal SNR without the 2^-24 of the sigma schedulers)
        EXPECT_TRUE(std::isinf(sched->sigmas()[i])) << "sigma " << i << " = " << sched->sigmas()[i];
        continue;
      }
      const double want = sg[i].get<double>();
      EXPECT_NEAR(sched->sigmas()[i], want, 2e-6 * want + 1e-9) << "sigma " << i;
    }
  }
}

TEST(SdSchedulerFields, LoopsMatchDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto file = safetensors::File::open(sd_data("scheduler_field_loops.safetensors"));
  const Tensor x_init = file.tensor("x_init", cpu).clone(), eps_fixed = file.tensor("eps_fixed", cpu).clone();
  int loops = 0;
  for (const auto& c : goldens()["cases"]) {
    for (const char* pred : {"epsilon", "v_prediction"}) {
      const std::string key = c["name"].get<std::string>() + "/" + pred;
      if (!file.find_tensor(key + "/out")) continue;
      SCOPED_TRACE(key);
      ++loops;
      auto sched = make_diffusion_scheduler(diffusion_scheduler_kind_from_name(c["sampler"].get<std::string>()),
                                  NoiseSchedule::from_json(config_of(c, pred)));
      sched->set_timesteps(4);
      const Tensor noises = file.tensor(key + "/noise", cpu).clone();
      Tensor x = ops::affine(x_init, sched->init_noise_sigma(), 0.0);
      for (int i = 0; i < sched->steps(); ++i) {
        const double t = sched->timesteps()[(size_t)i];
        Tensor out = ops::add(ops::affine(sched->scale_model_input(x, i), 0.5 * std::cos(t / 400.0), 0.0), eps_fixed);
        x = sched->step(out, i, x, noises.select(0, i));
      }
      // Zero terminal SNR starts at sigma = 4096 (alpha_cumprod 2^-24): diffusers' f32 arithmetic there is good to
      // about 4096 x 2^-24 of the values, so those loops get 1e-4 where the others get 1e-5.
      const double tol = key.find("zero_snr") != std::string::npos ? 1e-4 : 1e-5;
      RBEE_EXPECT_TENSOR_NEAR(x, file.tensor(key + "/out", cpu), tol, tol);
    }
  }
  EXPECT_GE(loops, 15);
}

// Fields a sampler reads whose values are not implemented: that sampler is refused, naming the field; samplers that
// do not read the field run.
TEST(SdSchedulerFields, UnimplementedFieldsAreRefused) {
  const nlohmann::json base = goldens()["config"];
  const std::vector<std::tuple<const char*, nlohmann::json, DiffusionSchedulerKind, DiffusionSchedulerKind>> cases = {
      // (field, value, a sampler that must refuse it, a sampler that does not read it)
      {"thresholding", true, DiffusionSchedulerKind::Ddim, DiffusionSchedulerKind::Euler},
      {"interpolation_type", "log_linear", DiffusionSchedulerKind::Euler, DiffusionSchedulerKind::Ddim},
      {"timestep_type", "continuous", DiffusionSchedulerKind::Euler, DiffusionSchedulerKind::DpmPP2M},
      {"use_exponential_sigmas", true, DiffusionSchedulerKind::Euler, DiffusionSchedulerKind::EulerAncestral},
      {"use_beta_sigmas", true, DiffusionSchedulerKind::DpmPP2MKarras, DiffusionSchedulerKind::Lcm},
      {"use_lu_lambdas", true, DiffusionSchedulerKind::DpmPP2M, DiffusionSchedulerKind::Euler},
      {"variance_type", "learned_range", DiffusionSchedulerKind::DpmPP2M, DiffusionSchedulerKind::Ddim},
      {"lambda_min_clipped", -5.1, DiffusionSchedulerKind::DpmPP2MKarras, DiffusionSchedulerKind::Euler},
      {"solver_type", "heun", DiffusionSchedulerKind::DpmPP2M, DiffusionSchedulerKind::Euler},
  };
  for (const auto& [key, value, refuses, runs] : cases) {
    nlohmann::json cfg = base;
    cfg[key] = value;
    const NoiseSchedule s = NoiseSchedule::from_json(cfg);
    const std::string why = unsupported_reason(refuses, s);
    EXPECT_NE(why.find(key), std::string::npos) << key << ": '" << why << "'";
    EXPECT_THROW(make_diffusion_scheduler(refuses, s), Error) << key;
    EXPECT_EQ(unsupported_reason(runs, s), "") << key;
    EXPECT_NO_THROW(make_diffusion_scheduler(runs, s)->set_timesteps(4)) << key;
  }
  // Values no sampler takes are refused when the config is read.
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"prediction_type", "sample"}, {"beta_schedule", "exp"}, {"final_sigmas_type", "last"},
           {"trained_betas", nlohmann::json::array({0.1, 0.2})}, {"timestep_spacing", "random"}}) {
    nlohmann::json cfg = base;
    cfg[key] = value;
    EXPECT_THROW(NoiseSchedule::from_json(cfg), Error) << key;
  }
  // DPM's lambda_min_clipped default (-inf, null once read) is not a refusal.
  nlohmann::json cfg = base;
  cfg["lambda_min_clipped"] = nullptr;
  EXPECT_EQ(unsupported_reason(DiffusionSchedulerKind::DpmPP2M, NoiseSchedule::from_json(cfg)), "");
}

}  // namespace
}  // namespace rbee::sd

namespace rbee::sd {
namespace {

// A DPM scheduler config as Python's json writes it: -Infinity (lambda_min_clipped's default) is not JSON; it reads
// as null, the field's default, and the sampler runs. A malformed file is still refused.
TEST(SdSchedulerFields, PythonNonFiniteLiteralsReadAsDefaults) {
  const std::string path = ::testing::TempDir() + "/dpm_scheduler_config.json";
  {
    std::ofstream f(path);
    f << R"({"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "scaled_linear", "beta_start": 0.00085,
             "beta_end": 0.012, "lambda_min_clipped": -Infinity, "note": "-Infinity in a string stays",
             "algorithm_type": "dpmsolver++", "solver_order": 2, "use_karras_sigmas": true})";
  }
  const nlohmann::json c = read_config_json(path);
  EXPECT_TRUE(c["lambda_min_clipped"].is_null());
  EXPECT_EQ(c["note"], "-Infinity in a string stays");
  const NoiseSchedule s = NoiseSchedule::from_json(c);
  EXPECT_TRUE(s.use_karras_sigmas);
  EXPECT_EQ(unsupported_reason(DiffusionSchedulerKind::DpmPP2MKarras, s), "");
  {
    std::ofstream f(path);
    f << R"({"beta_start": 0.1,)";
  }
  EXPECT_THROW(read_config_json(path), Error);
}

}  // namespace
}  // namespace rbee::sd
