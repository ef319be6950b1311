// Schedulers against diffusers: timestep and sigma sequences (20 and 4 steps) and a 4-step loop per update rule
// (tools/goldens/make_sd_scheduler_goldens.py).
#include <cmath>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/diffusion_scheduler.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::sd_data;

const nlohmann::json& goldens() {
  static nlohmann::json j = safetensors::read_json_file(sd_data("schedulers.json"));
  return j;
}

NoiseSchedule sd15(PredictionType pred = PredictionType::Epsilon) {
  NoiseSchedule s = NoiseSchedule::from_json(goldens()["config"]);
  s.prediction_type = pred;
  return s;
}

// alphas_cumprod within 5e-7 absolute (cumulative f32 products differ by a few ulps from torch's).
TEST(SdSchedule, AlphasCumprodMatchesDiffusers) {
  std::vector<float> acp = alphas_cumprod(sd15());
  const auto& want = goldens()["alphas_cumprod"];
  ASSERT_EQ(acp.size(), want.size());
  for (size_t i = 0; i < acp.size(); ++i) EXPECT_NEAR(acp[i], want[i].get<double>(), 5e-7) << i;  // a few f32 ulps of 1
}

struct SeqCase {
  const char* name;
  int steps;
};

class SdSchedulerSequence : public ::testing::TestWithParam<SeqCase> {};

// Timesteps equal (exactly: they are integers or f32 values), sigmas within f32 rounding (2e-6 relative).
TEST_P(SdSchedulerSequence, MatchesDiffusers) {
  const SeqCase c = GetParam();
  auto sched = make_diffusion_scheduler(diffusion_scheduler_kind_from_name(c.name), sd15());
  sched->set_timesteps(c.steps);
  const auto& g = goldens()[std::string(c.name) + "/" + std::to_string(c.steps)];
  const auto& ts = g["timesteps"];
  ASSERT_EQ(sched->timesteps().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(sched->timesteps()[i], ts[i].get<double>()) << "timestep " << i;
  EXPECT_NEAR(sched->init_noise_sigma(), g["init_noise_sigma"].get<double>(),
              2e-6 * g["init_noise_sigma"].get<double>());
  const bool full = g.contains("sigmas");
  const auto& sg = full ? g["sigmas"] : g["sigmas_at_timesteps"];
  ASSERT_EQ(sched->sigmas().size(), full ? sg.size() : sg.size() + 1);
  for (size_t i = 0; i < sg.size(); ++i) {
    double want = sg[i].get<double>();
    EXPECT_NEAR(sched->sigmas()[i], want, 2e-6 * want + 1e-9) << "sigma " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(All, SdSchedulerSequence,
                         ::testing::Values(SeqCase{"euler", 20}, SeqCase{"euler", 4}, SeqCase{"euler_a", 20},
                                           SeqCase{"euler_a", 4}, SeqCase{"ddim", 20}, SeqCase{"ddim", 4},
                                           SeqCase{"dpmpp_2m_karras", 20}, SeqCase{"dpmpp_2m_karras", 4},
                                           SeqCase{"lcm", 20}, SeqCase{"lcm", 4}),
                         [](const auto& info) {
                           return std::string(info.param.name) + "_" + std::to_string(info.param.steps);
                         });

struct LoopCase {
  const char* name;
  const char* pred;
};
class SdSchedulerLoop : public ::testing::TestWithParam<LoopCase> {};

// The 4-step loop with the synthetic model of the golden script: out = 0.5 * in * cos(t / 400) + eps_fixed.
TEST_P(SdSchedulerLoop, MatchesDiffusers) {
  const LoopCase c = GetParam();
  Device& cpu = rbee::test::cpu_device();
  auto file = safetensors::File::open(sd_data("scheduler_loops.safetensors"));
  const std::string key = std::string(c.name) + "/" + c.pred;
  Tensor x_init = file.tensor("x_init", cpu).clone();
  Tensor eps_fixed = file.tensor("eps_fixed", cpu).clone();
  Tensor noises = file.tensor(key + "/noise", cpu).clone();
  const PredictionType pred = std::string(c.pred) == "epsilon" ? PredictionType::Epsilon : PredictionType::VPrediction;
  auto sched = make_diffusion_scheduler(diffusion_scheduler_kind_from_name(c.name), sd15(pred));
  sched->set_timesteps(4);
  Tensor x = ops::affine(x_init, sched->init_noise_sigma(), 0.0);
  for (int i = 0; i < 4; ++i) {
    Tensor in = sched->scale_model_input(x, i);
    double t = sched->timesteps()[(size_t)i];
    Tensor out = ops::add(ops::affine(in, 0.5 * std::cos(t / 400.0), 0.0), eps_fixed);
    x = sched->step(out, i, x, noises.select(0, i));
  }
  RBEE_EXPECT_TENSOR_NEAR(x, file.tensor(key + "/out", cpu), 1e-5, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(All, SdSchedulerLoop,
                         ::testing::Values(LoopCase{"euler", "epsilon"}, LoopCase{"euler", "v_prediction"},
                                           LoopCase{"euler_a", "epsilon"}, LoopCase{"ddim", "epsilon"},
                                           LoopCase{"ddim", "v_prediction"}, LoopCase{"dpmpp_2m_karras", "epsilon"},
                                           LoopCase{"dpmpp_2m_karras", "v_prediction"}, LoopCase{"lcm", "epsilon"}),
                         [](const auto& info) { return std::string(info.param.name) + "_" + info.param.pred; });

TEST(SdSchedulerErrors, BadInputsThrow) {
  EXPECT_THROW(diffusion_scheduler_kind_from_name("k_lms"), Error);
  auto sched = make_diffusion_scheduler(DiffusionSchedulerKind::Euler, sd15());
  Device& cpu = rbee::test::cpu_device();
  Tensor x = ops::zeros({1, 4, 2, 2}, DType::F32, cpu);
  EXPECT_THROW(sched->step(x, 0, x, Tensor()), Error);  // no set_timesteps
  EXPECT_THROW(sched->set_timesteps(0), Error);
  EXPECT_THROW(sched->set_timesteps(1001), Error);
  sched->set_timesteps(4);
  EXPECT_THROW(sched->step(x, 4, x, Tensor()), Error);
  EXPECT_THROW(sched->step(ops::zeros({1, 4, 2, 3}, DType::F32, cpu), 0, x, Tensor()), Error);
  auto anc = make_diffusion_scheduler(DiffusionSchedulerKind::EulerAncestral, sd15());
  anc->set_timesteps(4);
  EXPECT_THROW(anc->step(x, 0, x, Tensor()), Error);  // needs noise
  auto lcm = make_diffusion_scheduler(DiffusionSchedulerKind::Lcm, sd15());
  EXPECT_THROW(lcm->set_timesteps(51), Error);
  EXPECT_THROW(NoiseSchedule::from_json(nlohmann::json{{"beta_schedule", "cosine"}}), Error);
  EXPECT_THROW(NoiseSchedule::from_json(nlohmann::json{{"prediction_type", "sample"}}), Error);
  EXPECT_THROW(NoiseSchedule::from_json(nlohmann::json{{"beta_start", 0.5}, {"beta_end", 0.1}}), Error);
}

}  // namespace
}  // namespace rbee::sd
