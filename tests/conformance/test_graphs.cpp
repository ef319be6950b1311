// Conformance: graph capture and replay of a decode step (Device::begin_graph_capture and friends).
//
// A decode step (quantized matvec, kv_cache_write, paged attention) is run once to warm the allocator,
// captured, then replayed after its inputs change in place (new activations, new query, one more position in
// the cache): the replayed outputs must equal an uncaptured run on the new inputs bit for bit (same kernels,
// same launch shapes). Backends without graphs must say so and refuse the calls with Unsupported; calls
// that cannot be recorded must be refused while capturing; memory the step used stays with the graph.
#include <algorithm>
#include <random>

#include "common/harness.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

class GraphCapture : public ::testing::TestWithParam<std::string> {};

// The step's fixed-address inputs.
struct Step {
  Tensor x, w, q, k_new, v_new, slot, k_cache, v_cache, seq_info, tables;
  AttentionParams params;
};

Step make_step(Device& device) {
  Step s;
  const int64_t k = 512, n = 96;
  s.x = make_tensor(random_values(2 * k, DType::F32, 1, -2, 2), {2, k}, DType::F32, device);
  s.w = ops::quantize(make_tensor(random_values(n * k, DType::F32, 2, -0.1, 0.1), {n, k}, DType::F32, device),
                      DType::Q4_K);
  s.q = make_tensor(random_values(2 * 8 * 64, DType::F32, 3), {2, 8, 64}, DType::F32, device);
  s.k_new = make_tensor(random_values(2 * 2 * 64, DType::F32, 4), {2, 2, 64}, DType::F32, device);
  s.v_new = make_tensor(random_values(2 * 2 * 64, DType::F32, 5), {2, 2, 64}, DType::F32, device);
  const Shape cache{16, 16, 2, 64};
  s.k_cache = make_tensor(random_values(cache.numel(), DType::F16, 6), cache, DType::F16, device);
  s.v_cache = make_tensor(random_values(cache.numel(), DType::F16, 7), cache, DType::F16, device);
  // Two decode sequences: contexts 37 and 100 (the new tokens at slots of positions 36 and 99).
  s.tables = make_tensor({3, 1, 4, 0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 2}, {2, 8}, DType::I32, device);
  s.seq_info = make_tensor({0, 1, 37, 1, 1, 100}, {2, 3}, DType::I32, device);
  s.slot = make_tensor({4 * 16 + 36 % 16, 13 * 16 + 99 % 16}, {2}, DType::I32, device);
  s.params.scale = 0.125f;
  s.params.causal = true;
  return s;
}

struct StepOut {
  Tensor y, attn;
};

StepOut run_step(const Step& s) {
  StepOut o;
  o.y = ops::qmatmul(s.x, s.w);
  ops::kv_cache_write(s.k_new, s.v_new, s.slot, s.k_cache, s.v_cache);
  o.attn = ops::paged_attention(s.q, s.k_cache, s.v_cache, s.seq_info, s.tables, s.params);
  return o;
}

// Writes new host values into an existing device tensor (its address stays the same).
void refill(const Tensor& t, const std::vector<double>& values) {
  t.copy_from(make_tensor(values, t.shape(), t.dtype(), cpu_device()));
}

// Runs the step once uncaptured (warm-up: its outputs go back to the cache for the capture to reuse), then records
// it; `captured` gets the recorded step's outputs, which every replay rewrites.
Device::GraphId warm_up_and_capture(Device& device, const Step& s, StepOut& captured) {
  (void)run_step(s);
  device.synchronize();
  device.begin_graph_capture();
  try {
    captured = run_step(s);
  } catch (...) {
    try {
      device.release_graph(device.end_graph_capture());
    } catch (...) {
      // end_graph_capture reports the broken capture; the step's own error is the one to see
    }
    throw;
  }
  return device.end_graph_capture();
}

TEST_P(GraphCapture, ReplayRecomputesTheStepOnNewInputs) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  if (!device->supports_graphs()) {
    try {
      device->begin_graph_capture();
      ADD_FAILURE() << "begin_graph_capture did not throw on a device without graphs";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
    }
    GTEST_SKIP() << device->id() << " has no graphs";
  }
  const Step s = make_step(*device);
  StepOut captured;
  const Device::GraphId graph = warm_up_and_capture(*device, s, captured);

  // Next step: new activations and query, the sequences one position longer, new K/V rows at the new slots.
  refill(s.x, random_values(s.x.numel(), DType::F32, 11, -2, 2));
  refill(s.q, random_values(s.q.numel(), DType::F32, 12));
  refill(s.k_new, random_values(s.k_new.numel(), DType::F32, 13));
  refill(s.v_new, random_values(s.v_new.numel(), DType::F32, 14));
  refill(s.seq_info, {0, 1, 38, 1, 1, 101});
  refill(s.slot, {4 * 16 + 37 % 16, 13 * 16 + 100 % 16});
  device->replay_graph(graph);
  const auto y_replayed = to_doubles(captured.y);
  const auto attn_replayed = to_doubles(captured.attn);

  // The same step uncaptured (kv_cache_write rewrites the same rows: idempotent).
  const StepOut direct = run_step(s);
  EXPECT_TRUE(all_close(y_replayed, to_doubles(direct.y), {0, 0}));
  EXPECT_TRUE(all_close(attn_replayed, to_doubles(direct.attn), {0, 0}));
  // And the replay really used the new inputs: the step on the old context gives something else.
  refill(s.seq_info, {0, 1, 37, 1, 1, 100});
  EXPECT_FALSE(all_close(attn_replayed, to_doubles(run_step(s).attn), {0, 0}));
  device->release_graph(graph);
}

// The captured step's temporaries (activation scratch, attention partials) are written again by every replay,
// so the device must not hand their memory to tensors allocated after the capture: tensors of every small
// size bucket, filled with a pattern after the capture, must keep it across replays.
TEST_P(GraphCapture, TemporariesOfTheStepStayWithTheGraph) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  if (!device->supports_graphs()) GTEST_SKIP() << device->id() << " has no graphs";
  const Step s = make_step(*device);
  StepOut captured;
  const Device::GraphId graph = warm_up_and_capture(*device, s, captured);
  // Three tensors per allocator size bucket from 256 bytes to 1 MiB (multiples of 256 up to 4 KiB, then four
  // buckets per power of two), each filled with 7.
  std::vector<int64_t> sizes;
  for (int64_t b = 256; b <= 4096; b += 256) sizes.push_back(b);
  for (int64_t p = 4096; p < (int64_t{1} << 20); p *= 2) {
    for (int64_t q = 1; q <= 4; ++q) sizes.push_back(p + q * p / 4);
  }
  std::vector<Tensor> others;
  for (const int64_t bytes : sizes) {
    for (int i = 0; i < 3; ++i) others.push_back(ops::full({bytes / 4}, 7.0, DType::F32, *device));
  }
  device->replay_graph(graph);
  device->replay_graph(graph);
  for (const Tensor& t : others) {
    const auto v = to_doubles(t);
    ASSERT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 7.0; }))
        << "a replay wrote into a tensor of " << t.nbytes() << " bytes allocated after the capture";
  }
  device->release_graph(graph);
}

TEST_P(GraphCapture, UnrecordableCallsAreRefusedWhileCapturing) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  if (!device->supports_graphs()) GTEST_SKIP() << device->id() << " has no graphs";
  const Tensor x = make_tensor(random_values(64, DType::F32, 1), {64}, DType::F32, *device);
  (void)ops::affine(x, 2.0, 1.0);  // warm-up
  device->begin_graph_capture();
  const Tensor y = ops::affine(x, 2.0, 1.0);
  auto expect_refused = [&](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw while capturing";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    }
  };
  expect_refused([&] { device->synchronize(); }, "synchronize");
  expect_refused([&] { (void)x.to_vector<float>(); }, "copy_to_host");
  // Just over 1 GiB: a size bucket no test of this suite allocates, so the cache cannot serve it.
  expect_refused([&] { (void)Tensor::empty({(int64_t{1} << 28) + 4099}, DType::F32, *device); }, "a new allocation");
  expect_refused([&] { device->empty_cache(); }, "empty_cache");
  const Device::GraphId graph = device->end_graph_capture();
  device->replay_graph(graph);
  std::vector<double> want(64);
  const auto xv = to_doubles(x);
  for (int i = 0; i < 64; ++i) want[i] = round_to_dtype(xv[i] * 2.0 + 1.0, DType::F32);
  EXPECT_TRUE(all_close(to_doubles(y), want, {0, 0}));
  device->release_graph(graph);
  EXPECT_THROW(device->replay_graph(graph), Error);
}

INSTANTIATE_TEST_SUITE_P(Graphs, GraphCapture, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rbee::test
