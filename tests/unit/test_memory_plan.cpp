// The memory plan (rbee/llm/memory_plan.h) against what loading really allocates, on the CPU devices of this
// machine: the default model (SmolLM2 Q4_1) and random-weight models at the tiny presets' shapes, each on the host
// (cpu:0, weights read in place from the mapped file) and on a CPU instance (cpu:4, every weight copied into its
// allocator, as on a GPU). After loading, making the planned KV cache and running one step of the planned largest
// shape, each device's allocator must hold within 10% of the plan's allocated bytes, its weights within 1% of
// the plan's weights and its KV cache within 1%. Then fitting and refusing: a device with a small budget
// (RBEE_FAULT_ALLOC_LIMIT on cpu:7) gets a lower context or fewer layers, or, with fitting off, a refusal that
// names the numbers; a draft model for speculative decoding counted with the model; and the request parsers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "rbee/backend/device.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/memory_plan.h"
#include "rbee/llm/placement.h"
#include "rbee/llm/model.h"
#include "rbee/llm/model_files.h"

namespace rbee::llm {
namespace {

Device& cpu(int i) { return Registry::global().select("cpu", i); }

const std::string& random_model(const std::string& preset, DType type) {
  return test::random_model_file(preset, type, 5);
}

// A plan that does not fit: its refusal names every part, and require_fit throws OutOfMemory.
void expect_refused(const MemoryPlan& p, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(p.fits) << p.table();
  const std::string why = p.refusal();
  for (const char* part : parts) EXPECT_NE(why.find(part), std::string::npos) << "no '" << part << "' in: " << why;
  try {
    require_fit(p);
    FAIL() << "require_fit accepted a plan that does not fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
  }
}

// Loads the plan's placement, makes its cache, runs one step of `parallel` sequences whose prompts add up to the
// plan's batch tokens, and checks the allocators against the plan.
void expect_plan_holds(const std::string& path, Device& device, int ctx, int parallel, int batch_tokens) {
  SCOPED_TRACE(path + " on " + device.id());
  const ModelDescription d = describe_model(path);
  PlanRequest req;
  req.devices = {&device};
  req.ctx_size = ctx;
  req.ctx_given = true;
  req.parallel = parallel;
  req.batch_tokens = batch_tokens;
  req.logit_rows = parallel;
  const MemoryPlan plan = plan_memory(d, req);
  ASSERT_TRUE(plan.fits) << plan.table();
  device.empty_cache();
  const auto baseline = held_bytes(plan.placement.devices);
  LoadOptions o;
  o.placement = plan.placement;
  auto model = Model::load(path, o);
  KvCache cache(model->kv_layout(), plan.kv_blocks(), plan.block_size, plan.kv_dtype);
  std::vector<SequenceKv> kv((size_t)parallel);
  ForwardBatch step;
  for (int s = 0; s < parallel; ++s) {
    const int len = batch_tokens / parallel + (s < batch_tokens % parallel ? 1 : 0);
    ASSERT_TRUE(kv[(size_t)s].reserve(cache, len));
    for (int i = 0; i < len; ++i) step.tokens.push_back((TokenId)((i * 7 + s) % d.config.vocab_size));
    step.seqs.push_back({&kv[(size_t)s], len, len, false});
  }
  const Tensor logits = model->forward(step, cache);
  EXPECT_EQ(logits.dim(0), parallel);
  const auto checks = measure_plan(plan, *model, cache, baseline);
  ASSERT_EQ(checks.size(), 1u);
  const PlanCheck& c = checks[0];
  std::printf("%s: %s", path.c_str(), plan_check_table(checks).c_str());
  EXPECT_NEAR((double)c.measured_weights, (double)c.planned_weights, 0.01 * (double)c.planned_weights);
  EXPECT_NEAR((double)c.measured_kv, (double)c.planned_kv, 0.01 * (double)c.planned_kv);
  EXPECT_NEAR((double)c.measured_allocated, (double)c.planned_allocated, 0.10 * (double)c.planned_allocated)
      << plan.table() << plan_check_table(checks);
}

TEST(MemoryPlan, DefaultModelOnTheHostAndOnAnInstance) {
  if (!std::filesystem::exists(RBEE_DEFAULT_MODEL)) GTEST_SKIP() << "default model missing: run scripts/setup.sh";
  expect_plan_holds(RBEE_DEFAULT_MODEL, cpu(0), 4096, 1, 512);
  expect_plan_holds(RBEE_DEFAULT_MODEL, cpu(4), 4096, 1, 512);
  expect_plan_holds(RBEE_DEFAULT_MODEL, cpu(4), 2048, 8, 264);
}

TEST(MemoryPlan, RandomShapes) {
  expect_plan_holds(random_model("tiny-llama", DType::F16), cpu(4), 2048, 4, 260);
  expect_plan_holds(random_model("tiny-qwen2", DType::Q8_0), cpu(4), 1024, 2, 128);
  expect_plan_holds(random_model("tiny-gemma3", DType::F32), cpu(4), 2048, 1, 512);
  expect_plan_holds(random_model("tiny-gemma3", DType::BF16), cpu(0), 2048, 1, 512);
}

// Writes nothing: the plan of the 7B and 70B shapes from a description made up of the presets' shapes, as a
// sanity check of the arithmetic the GPU run measures (weights within 1% of the file's tensor bytes).
TEST(MemoryPlan, LargePresetWeightsAddUp) {
  for (const char* name : {"llama2-7b", "llama2-70b"}) {
    const ShapePreset& p = shape_preset(name);
    ModelDescription d;
    d.path = name;
    d.config.arch = p.arch;
    d.config.vocab_size = p.vocab;
    d.config.hidden_size = p.hidden;
    d.config.intermediate_size = p.ffn;
    d.config.n_layers = p.layers;
    d.config.n_heads = p.heads;
    d.config.n_kv_heads = p.kv_heads;
    d.config.head_dim = p.hidden / p.heads;
    d.config.rotary_dim = d.config.head_dim;
    d.config.max_positions = p.context;
    d.config.layer_is_local.assign((size_t)p.layers, false);
    const int64_t q = (int64_t)p.heads * d.config.head_dim, kv = (int64_t)p.kv_heads * d.config.head_dim;
    int64_t file_bytes = 0;
    auto add = [&](const std::string& n, Shape s, DType t) {
      d.weights[n] = {s, t};
      file_bytes += dtype_row_bytes(t, s[s.rank() - 1]) * (s.numel() / s[s.rank() - 1]);
    };
    add("token_embd.weight", {p.vocab, p.hidden}, DType::Q8_0);
    add("output.weight", {p.vocab, p.hidden}, DType::Q8_0);
    add("output_norm.weight", {p.hidden}, DType::F32);
    for (int l = 0; l < p.layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      add(b + "attn_norm.weight", {p.hidden}, DType::F32);
      add(b + "ffn_norm.weight", {p.hidden}, DType::F32);
      add(b + "attn_q.weight", {q, p.hidden}, DType::Q8_0);
      add(b + "attn_k.weight", {kv, p.hidden}, DType::Q8_0);
      add(b + "attn_v.weight", {kv, p.hidden}, DType::Q8_0);
      add(b + "attn_output.weight", {p.hidden, q}, DType::Q8_0);
      add(b + "ffn_gate.weight", {p.ffn, p.hidden}, DType::Q8_0);
      add(b + "ffn_up.weight", {p.ffn, p.hidden}, DType::Q8_0);
      add(b + "ffn_down.weight", {p.hidden, p.ffn}, DType::Q8_0);
    }
    PlanRequest req;
    req.devices = {&cpu(4)};
    req.ctx_size = 4096;
    req.fit = false;
    const MemoryPlan plan = plan_memory(d, req);
    int64_t planned = 0;
    for (const DevicePlan& dp : plan.devices) planned += dp.weights + dp.mapped;
    EXPECT_NEAR((double)planned, (double)file_bytes, 0.01 * (double)file_bytes) << name;
    // Two ranks of a tensor split hold half each, plus the embedding on rank 0; the head is cut by vocabulary rows
    // over the ranks (Placement::splits_head), or whole on rank 0 with RBEE_TP_SPLIT_HEAD=0.
    req.devices = {&cpu(4), &cpu(5)};
    req.split = SplitMode::Tensor;
    const MemoryPlan tp = plan_memory(d, req);
    ASSERT_EQ(tp.devices.size(), 2u);
    Placement tensor;
    tensor.split = SplitMode::Tensor;
    tensor.devices = req.devices;
    const int64_t embd = (tensor.splits_head() ? 1 : 2) * dtype_row_bytes(DType::Q8_0, p.hidden) * p.vocab;
    EXPECT_NEAR((double)tp.devices[0].weights - (double)embd, (double)tp.devices[1].weights,
                0.01 * (double)tp.devices[1].weights);
    // KV: 2 x layers x kv heads x head_dim x 2 bytes per position, split by kv heads.
    const double kv_bytes = 2.0 * p.layers * kv * 2 * 4096;
    EXPECT_NEAR((double)(tp.devices[0].kv + tp.devices[1].kv), kv_bytes, 0.01 * kv_bytes);
  }
}

// cpu:7 with a budget of `bytes` (the allocator's fault limit, which the plan reads as the device's size).
Device& small_device(int64_t bytes) {
  static Device* made = nullptr;
  static int64_t budget = 0;
  if (!made) {
    setenv("RBEE_FAULT_ALLOC_DEVICE", "cpu:7", 1);
    setenv("RBEE_FAULT_ALLOC_LIMIT", std::to_string(bytes).c_str(), 1);
    made = &cpu(7);
    unsetenv("RBEE_FAULT_ALLOC_DEVICE");
    unsetenv("RBEE_FAULT_ALLOC_LIMIT");
    budget = bytes;
  }
  EXPECT_EQ(budget, bytes) << "cpu:7 was made with another budget";
  return *made;
}

// Room for every weight of `d` and a 2048-position cache on one device, not for 8192 positions.
int64_t small_budget(const ModelDescription& d) {
  PlanRequest req;
  req.devices = {&cpu(4)};
  req.ctx_size = 2048;
  req.ctx_given = true;
  const MemoryPlan at2048 = plan_memory(d, req);
  return at2048.devices[0].total() + (at2048.devices[0].kv / 4);
}

TEST(MemoryPlan, FitsBySmallerContextOrFewerLayersOrRefuses) {
  if (!std::filesystem::exists(RBEE_DEFAULT_MODEL)) GTEST_SKIP() << "default model missing: run scripts/setup.sh";
  const ModelDescription d = describe_model(RBEE_DEFAULT_MODEL);
  PlanRequest big;
  big.devices = {&cpu(4)};
  big.ctx_size = 8192;
  big.ctx_given = true;
  const MemoryPlan full = plan_memory(d, big);
  const int64_t budget = small_budget(d);
  ASSERT_LT(budget, full.devices[0].total());
  Device& small = small_device(budget);
  ASSERT_EQ(small.memory_stats().limit_bytes, budget);

  PlanRequest req;
  req.devices = {&small};
  req.ctx_size = 8192;
  // Context not given: lowered to what fits, every layer stays on the device.
  MemoryPlan p = plan_memory(d, req);
  EXPECT_TRUE(p.fits) << p.table();
  EXPECT_GE(p.ctx_size, 2048);
  EXPECT_LT(p.ctx_size, 8192);
  EXPECT_EQ(p.placement.ranks(), 1);
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes[0].find("context lowered from 8192"), std::string::npos) << p.notes[0];
  // Context given: the context stays, the first layers go to the host.
  req.ctx_given = true;
  p = plan_memory(d, req);
  EXPECT_TRUE(p.fits) << p.table();
  EXPECT_EQ(p.ctx_size, 8192);
  ASSERT_EQ(p.placement.ranks(), 2) << p.table();
  EXPECT_EQ(p.placement.devices[0], &cpu(0));
  EXPECT_GT(p.placement.layer_begin[1], 0);
  // --gpu-layers given as well: nothing left to change, refused with the numbers.
  req.gpu_layers = d.config.n_layers;
  p = plan_memory(d, req);
  expect_refused(p, {"does not fit", "cpu:7 needs", "KV cache", "for 8192 positions", "free", "--ctx-size"});
  // Fitting off: the request as given is refused even when a smaller one would fit.
  req.gpu_layers = -1;
  req.fit = false;
  EXPECT_FALSE(plan_memory(d, req).fits);
  // Nothing was allocated on the small device by planning.
  EXPECT_EQ(small.memory_stats().raw_allocations, 0);
}

TEST(MemoryPlan, ExplicitGpuLayersAndRatios) {
  if (!std::filesystem::exists(RBEE_DEFAULT_MODEL)) GTEST_SKIP() << "default model missing: run scripts/setup.sh";
  const ModelDescription d = describe_model(RBEE_DEFAULT_MODEL);
  const int n = d.config.n_layers;
  PlanRequest req;
  req.devices = {&cpu(4)};
  req.gpu_layers = 10;
  MemoryPlan p = plan_memory(d, req);
  ASSERT_EQ(p.placement.ranks(), 2);
  EXPECT_EQ(p.placement.layer_begin, (std::vector<int>{0, n - 10, n}));
  req.gpu_layers = 0;
  p = plan_memory(d, req);
  ASSERT_EQ(p.placement.ranks(), 1);
  EXPECT_EQ(p.placement.devices[0], &cpu(0));
  req.gpu_layers = -1;
  req.devices = {&cpu(4), &cpu(5)};
  req.split_ratio = {1, 2};
  p = plan_memory(d, req);
  ASSERT_EQ(p.placement.ranks(), 2);
  EXPECT_EQ(p.placement.layer_begin, (std::vector<int>{0, n / 3, n}));
  req.split_ratio = {1};
  EXPECT_THROW(plan_memory(d, req), Error);
  req.split_ratio.clear();
  req.split = SplitMode::Tensor;
  req.gpu_layers = 5;
  EXPECT_THROW(plan_memory(d, req), Error);  // a tensor split runs every layer on every device
}

// Speculative decoding's draft model (PlanRequest::draft) counts on the device the logits come out on, as a model
// of its own at the plan's context; the allocators hold what the plan says with it loaded (the default model as
// its own draft, so that a missing share would double the figure); a device that takes the model alone but not
// both gets a lower context, or with the context given a refusal naming the draft.
TEST(MemoryPlan, DraftModelCountsOnTheDeviceOfTheLogits) {
  if (!std::filesystem::exists(RBEE_DEFAULT_MODEL)) GTEST_SKIP() << "default model missing: run scripts/setup.sh";
  const ModelDescription d = describe_model(RBEE_DEFAULT_MODEL);
  const int n = d.config.n_layers;
  PlanRequest req;
  req.devices = {&cpu(4)};
  req.ctx_size = 1024;
  req.ctx_given = true;
  req.parallel = 2;
  req.batch_tokens = 64 + 2 * 5;  // a prompt chunk and two jobs' next token with 4 drafts each (the worker's)
  req.logit_rows = 2 * 5;
  const MemoryPlan alone = plan_memory(d, req);
  PlanRequest dreq = req;
  dreq.decode_graphs = false;
  const MemoryPlan draft_alone = plan_memory(d, dreq);
  req.draft = &d;
  const MemoryPlan with = plan_memory(d, req);
  ASSERT_TRUE(alone.fits && draft_alone.fits && with.fits) << with.table();
  ASSERT_EQ(with.devices.size(), 1u);
  const DevicePlan& dp = with.devices[0];
  EXPECT_EQ(dp.draft, draft_alone.devices[0].allocated());
  EXPECT_EQ(dp.draft_mapped, draft_alone.devices[0].mapped);
  EXPECT_GT(dp.draft, draft_alone.devices[0].weights);  // weights, KV cache and activations
  EXPECT_EQ(dp.total(), alone.devices[0].total() + dp.draft + dp.draft_mapped);
  EXPECT_EQ(dp.allocated(), alone.devices[0].allocated() + dp.draft);
  EXPECT_EQ(with.draft, d.path);
  EXPECT_NE(with.table().find("draft model"), std::string::npos) << with.table();
  EXPECT_EQ(with.to_json()["devices"][0]["draft"].get<int64_t>(), dp.draft);

  // Loaded as the worker loads them: the allocator holds the plan's figure (within the 10% of the tests above).
  cpu(4).empty_cache();
  const auto baseline = held_bytes({&cpu(4)});
  LoadOptions o;
  o.placement = with.placement;
  auto model = Model::load(RBEE_DEFAULT_MODEL, o);
  KvCache cache(model->kv_layout(), with.kv_blocks(), with.block_size, with.kv_dtype);
  LoadOptions dload;
  dload.device = &model->device();
  auto draft = Model::load(RBEE_DEFAULT_MODEL, dload);
  KvCache draft_cache(draft->kv_layout(), with.kv_blocks(), with.block_size, with.kv_dtype);
  for (auto [m, c] : {std::pair<Model*, KvCache*>{model.get(), &cache}, {draft.get(), &draft_cache}}) {
    std::vector<SequenceKv> kv(2);
    ForwardBatch step;
    for (int s = 0; s < 2; ++s) {
      const int len = with.batch_tokens / 2;
      ASSERT_TRUE(kv[(size_t)s].reserve(*c, len));
      for (int i = 0; i < len; ++i) step.tokens.push_back((TokenId)((i * 7 + s) % d.config.vocab_size));
      step.seqs.push_back({&kv[(size_t)s], len, len, false});
    }
    m->forward(step, *c);
    for (auto& q : kv) q.release(*c);
  }
  const auto checks = measure_plan(with, *model, cache, baseline);
  ASSERT_EQ(checks.size(), 1u);
  std::printf("with the draft: %s", plan_check_table(checks).c_str());
  EXPECT_NEAR((double)checks[0].measured_allocated, (double)checks[0].planned_allocated,
              0.10 * (double)checks[0].planned_allocated)
      << with.table() << plan_check_table(checks);

  // Layer split: only the last stage (the logits) holds the draft; tensor split: rank 0.
  req.devices = {&cpu(4), &cpu(5)};
  req.split_ratio = {1, 1};
  MemoryPlan split = plan_memory(d, req);
  ASSERT_EQ(split.devices.size(), 2u) << split.table();
  EXPECT_EQ(split.devices[0].draft, 0);
  EXPECT_GT(split.devices[1].draft, 0);
  req.split = SplitMode::Tensor;
  split = plan_memory(d, req);
  ASSERT_EQ(split.devices.size(), 2u) << split.table();
  EXPECT_GT(split.devices[0].draft, 0);
  EXPECT_EQ(split.devices[1].draft, 0);
  req.split = SplitMode::Layer;
  req.split_ratio.clear();

  // cpu:7 with room for the model and 2048 positions (the test above): the model alone fits there with 1024
  // positions, not with itself as its draft.
  Device& small = small_device(small_budget(d));
  const int64_t budget = small.memory_stats().limit_bytes;
  req.devices = {&small};
  req.gpu_layers = n;  // every layer on the device: only the context can give way
  req.draft = nullptr;
  EXPECT_TRUE(plan_memory(d, req).fits);
  req.draft = &d;
  expect_refused(plan_memory(d, req),
                 {"with the draft model", "draft model", "cpu:7 needs", "a smaller draft model"});
  // Context not given, a small draft (random tiny-llama): the context is lowered until both caches fit, to no
  // more than the model alone gets.
  const ModelDescription tiny = describe_model(random_model("tiny-llama", DType::F16));
  req.ctx_size = 8192;
  req.ctx_given = false;
  req.draft = nullptr;
  const MemoryPlan lowered_alone = plan_memory(d, req);
  req.draft = &tiny;
  const MemoryPlan p = plan_memory(d, req);
  EXPECT_TRUE(p.fits) << p.table();
  EXPECT_LT(p.ctx_size, 8192);
  EXPECT_LE(p.ctx_size, lowered_alone.ctx_size);
  EXPECT_GT(p.devices[0].draft, 0);
  EXPECT_LE(p.devices[0].total(), budget);
  EXPECT_EQ(small.memory_stats().raw_allocations, 0);
}

TEST(MemoryPlan, Parsers) {
  EXPECT_EQ(parse_gpu_layers("auto"), -1);
  EXPECT_EQ(parse_gpu_layers("12"), 12);
  EXPECT_THROW(parse_gpu_layers("-1"), Error);
  EXPECT_THROW(parse_gpu_layers("many"), Error);
  EXPECT_EQ(parse_split_ratio("3,1"), (std::vector<double>{3, 1}));
  EXPECT_THROW(parse_split_ratio("0,0"), Error);
  EXPECT_THROW(parse_split_ratio("1,x"), Error);
  EXPECT_EQ(parse_device_list("cpu,cpu:1").size(), 2u);
  EXPECT_THROW(parse_device_list("cpu:1,cpu:1"), Error);
  EXPECT_THROW(parse_device_list("tpu:0"), Error);
  EXPECT_THROW(parse_device_list("cpu:9"), Error);
  EXPECT_THROW(parse_device_list("cpu:,"), Error);
  EXPECT_EQ(proportional_split(30, {1, 2}), (std::vector<int>{10, 20}));
  EXPECT_EQ(proportional_split(3, {1, 1}), (std::vector<int>{2, 1}));
  EXPECT_EQ(proportional_split(11008, {1, 1}, 256), (std::vector<int>{5632, 5376}));
  EXPECT_EQ(proportional_split(8, {0, 1}), (std::vector<int>{0, 8}));
}

// The head's vocabulary rows per rank: contiguous, covering the vocabulary once, the remainder on the first ranks;
// whole on the rank of the logits without a cut (layer split, one device, RBEE_TP_SPLIT_HEAD=0).
TEST(MemoryPlan, HeadRowsPerRank) {
  Placement tensor;
  tensor.split = SplitMode::Tensor;
  tensor.devices = {nullptr, nullptr, nullptr};  // only counted (cpu:6 and cpu:7 are other tests' budget devices)
  if (!tensor.splits_head()) GTEST_SKIP() << "RBEE_TP_SPLIT_HEAD=0";
  EXPECT_EQ(tensor.head_rows(0, 32003), (std::pair<int64_t, int64_t>{0, 10668}));
  EXPECT_EQ(tensor.head_rows(1, 32003), (std::pair<int64_t, int64_t>{10668, 10668}));
  EXPECT_EQ(tensor.head_rows(2, 32003), (std::pair<int64_t, int64_t>{21336, 10667}));
  Placement layer;
  layer.devices = {nullptr, nullptr};
  layer.layer_begin = {0, 1, 2};
  EXPECT_FALSE(layer.splits_head());
  EXPECT_EQ(layer.head_rows(0, 100), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(layer.head_rows(1, 100), (std::pair<int64_t, int64_t>{0, 100}));
  tensor.devices = {nullptr};
  EXPECT_FALSE(tensor.splits_head());
  EXPECT_EQ(tensor.head_rows(0, 100), (std::pair<int64_t, int64_t>{0, 100}));
}

}  // namespace
}  // namespace rbee::llm
