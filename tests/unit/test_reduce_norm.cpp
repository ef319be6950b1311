// all_reduce_add_rms_norm_qmatmul (rbee/backend/reduce_norm.h) and StepContext::reduce_norm (RBEE_TP_REDUCE_NORM):
//  - Collective level: where the GPU backend has two or three devices (the emulator with RBEE_EMU_DEVICES=2 or 3, or
//    GPUs), the GPU communicator's fused kernel + GEMM against the composition (all_reduce_sum, then
//    ops::add_rms_norm_qmatmul) on the same devices, bit for bit: decode rows that take the vendor GEMM (9 .. 256
//    rows of 4096, one and two rows a block), other widths, F16 and BF16 weights, rows that are not 16-byte aligned
//    (the kernel's 4-byte path; the reference then from aligned copies, since unaligned rows take separate ops whose
//    norm sums in another order), each three rounds with ordinary all-reduces of other sizes in between (the fused
//    kernel's protocol state is its own), with a residual after the sum (the attention output's form) or rank 0's
//    addend before it (the down projection's: all_reduce_sum_with, then the next layer's rms_norm_qmatmul); shapes
//    it does not take (8 rows: the gemv path; more rows than its inbox holds) must fall back (the counter of fused
//    passes stays still) with the same bits; with the kernel's fences and with release / acquire flags
//    (RBEE_ALLREDUCE_FENCE=release).
//  - Model level: a tensor-split random Llama (F16) decoding batches of 12 sequences (12 rows: the vendor GEMM) and
//    prefilling prompts of 9-12 tokens, logits bit-identical with the switch on and off, over two CPU ranks (the host
//    communicator has no fused pass: the fallback composition) and two GPU ranks (the counter must move).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/on_ranks.h"
#include "common/random_models.h"
#include "common/scoped_env.h"
#include "common/two_gpu_backend.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/backend/reduce_norm.h"
#include "rbee/core/tensor.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/memory_plan.h"
#include "rbee/llm/model.h"
#include "rbee/ops.h"

namespace rbee {
namespace {

using test::on_ranks;

std::vector<float> randoms(int64_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A [rows, cols] f32 tensor of `values`; misaligned: a view one float into a larger buffer (not 16-byte aligned).
Tensor rows_tensor(const std::vector<float>& values, int64_t rows, int64_t cols, Device& device, bool misaligned) {
  if (!misaligned) return Tensor::from_vector(values, {rows, cols}, device);
  std::vector<float> padded(values.size() + 1, 0.f);
  std::copy(values.begin(), values.end(), padded.begin() + 1);
  return Tensor::from_vector(padded, {(int64_t)padded.size()}, device).narrow(0, 1, rows * cols).view({rows, cols});
}

struct Case {
  int64_t rows, k, n;
  DType wtype;
  bool misaligned;
  bool fused;           // whether the GPU communicator takes it
  bool addend = false;  // the down projection's form: rank 0's addend before the sum, no residual after
};

void check_case(Communicator& comm, const Case& c, int round) {
  const int ranks = comm.size();
  SCOPED_TRACE(comm.name() + ": " + std::to_string(c.rows) + " x " + std::to_string(c.k) + " -> " +
               std::to_string(c.n) + " " + std::string(dtype_name(c.wtype)) + (c.misaligned ? " misaligned" : "") + ", round " +
               std::to_string(round));
  const int64_t m = c.rows, k = c.k;
  const std::vector<float> residual = randoms(m * k, 100 + round), weight = randoms(k, 200, 0.5f);
  const std::vector<float> addend = randoms(m * k, 150 + round);
  const std::vector<float> w_values = randoms(c.n * k, 300 + round, 0.05f);
  std::vector<std::vector<float>> sum_fused((size_t)ranks), out_fused((size_t)ranks), sum_ref((size_t)ranks),
      out_ref((size_t)ranks);
  const uint64_t before = fused_reduce_norms();
  on_ranks(ranks, [&](int r) {
    Device& dev = comm.device(r);
    const std::vector<float> partial = randoms(m * k, 1000 * round + r);
    const Tensor w = ops::cast(Tensor::from_vector(w_values, {c.n, k}, dev), c.wtype);
    const Tensor nw = Tensor::from_vector(weight, {k}, dev);
    const Tensor res = c.addend ? Tensor() : rows_tensor(residual, m, k, dev, c.misaligned);
    const Tensor add = c.addend && r == 0 ? rows_tensor(addend, m, k, dev, c.misaligned) : Tensor();
    // An ordinary all-reduce of another size first: the fused kernel's rounds and inbox are its own.
    const Tensor other = Tensor::from_vector(randoms(4099, 7 + r), {4099}, dev);
    comm.all_reduce_sum(r, other);
    {
      const Tensor x = rows_tensor(partial, m, k, dev, c.misaligned);
      auto [s, o] = all_reduce_add_rms_norm_qmatmul(comm, r, x, res, nw, 1e-5f, w, ReduceExtras{add, Tensor()});
      sum_fused[(size_t)r] = s.to_vector<float>();
      out_fused[(size_t)r] = o.to_vector<float>();
    }
    {  // the reference from 16-byte aligned rows (the norm pass; unaligned rows take separate ops)
      const Tensor x = rows_tensor(partial, m, k, dev, false);
      const Tensor add_a = add.defined() ? add.contiguous().clone() : Tensor();
      const Tensor res_a = res.defined() ? res.contiguous().clone() : Tensor();
      all_reduce_sum_with(comm, r, x, ReduceExtras{add_a, Tensor()});
      if (c.addend) {
        sum_ref[(size_t)r] = x.to_vector<float>();
        out_ref[(size_t)r] = ops::rms_norm_qmatmul(x, nw, 1e-5f, w).to_vector<float>();
      } else {
        auto [s, o] = ops::add_rms_norm_qmatmul(res_a, x, nw, 1e-5f, w);
        sum_ref[(size_t)r] = s.to_vector<float>();
        out_ref[(size_t)r] = o.to_vector<float>();
      }
    }
  });
  const bool on_gpu = comm.name() != "host";
  EXPECT_EQ(fused_reduce_norms() - before, c.fused && on_gpu ? (uint64_t)ranks : 0u) << "fused passes";
  for (int r = 0; r < ranks; ++r) {
    ASSERT_EQ(sum_fused[(size_t)r].size(), sum_ref[(size_t)r].size());
    ASSERT_EQ(out_fused[(size_t)r].size(), out_ref[(size_t)r].size());
    EXPECT_EQ(0, std::memcmp(sum_fused[(size_t)r].data(), sum_ref[(size_t)r].data(), sum_ref[(size_t)r].size() * 4))
        << "sum_out, rank " << r;
    EXPECT_EQ(0, std::memcmp(out_fused[(size_t)r].data(), out_ref[(size_t)r].data(), out_ref[(size_t)r].size() * 4))
        << "out, rank " << r;
    EXPECT_EQ(0, std::memcmp(out_fused[(size_t)r].data(), out_fused[0].data(), out_ref[0].size() * 4))
        << "rank " << r << " differs from rank 0";
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {64, 4096, 48, DType::F16, false, true},     // a decode step of 64 sequences, one row a block
      {9, 4096, 40, DType::BF16, false, true},     // the fewest rows that take the vendor GEMM
      {200, 4096, 24, DType::F16, false, true},    // two rows a block (128 blocks), the last ones one
      {20, 1000, 16, DType::F16, false, true},     // a width that is not a multiple of 256 threads x 8
      {12, 2048, 32, DType::BF16, true, true},     // 4-byte loads and stores (x, residual not 16-byte aligned)
      {8, 4096, 16, DType::F16, false, false},     // the gemv rows: not taken
      {300, 4096, 16, DType::F16, false, false},   // three rows a block exceed the inbox: not taken
      {64, 4096, 40, DType::F16, false, true, true},   // the down projection's form (rank 0's addend)
      {130, 2048, 24, DType::BF16, true, true, true},  // the same, two rows in some blocks, 4-byte path
      {5, 4096, 24, DType::F16, false, false, true},   // the same at gemv rows: not taken
  };
  return c;
}

TEST(ReduceNorm, FallsBackOnHostCommunicator) {
  Registry& registry = Registry::global();
  auto comm = make_host_communicator({&registry.select("cpu", 0), &registry.select("cpu", 1)});
  for (const Case& c : {cases()[0], cases()[3], cases()[5], cases()[7]}) check_case(*comm, c, 0);
}

TEST(ReduceNorm, GpuFusedEqualsComposition) {
  Backend* gpu = test::two_gpu_backend();
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  for (int ranks = 2; ranks <= std::min(3, gpu->device_count()); ++ranks) {
  for (const char* fence : {"thread", "release"}) {  // fences and flags, or release / acquire flags
    test::ScopedEnv env("RBEE_ALLREDUCE_FENCE", fence), with_buffers("RBEE_TP_REDUCE_NORM", "1");
    SCOPED_TRACE(std::string("RBEE_ALLREDUCE_FENCE=") + fence);
    std::vector<Device*> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(&gpu->device(r));
    std::string why;
    auto comm = gpu->make_communicator(devices, &why);
    ASSERT_TRUE(comm) << why;
    if (comm->name().rfind("p2p", 0) != 0) GTEST_SKIP() << "no peer access between the GPUs: " << why;
    for (int round = 0; round < 3; ++round) {
      for (const Case& c : cases()) check_case(*comm, c, round);
    }
  }
  }
}

// Without RBEE_TP_REDUCE_NORM=1 when it is made, the GPU communicator has no buffers for the fused pass and declines
// it (the composition runs, the same bits).
TEST(ReduceNorm, GpuDeclinesWithoutTheSwitch) {
  Backend* gpu = test::two_gpu_backend();
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  test::ScopedEnv off("RBEE_TP_REDUCE_NORM", "0");
  std::string why;
  const std::vector<Device*> devices = {&gpu->device(0), &gpu->device(1)};
  auto comm = gpu->make_communicator(devices, &why);
  ASSERT_TRUE(comm) << why;
  Case c = cases()[0];
  c.fused = false;
  check_case(*comm, c, 0);
}

// ---------------------------------------------------------------------------------------------- the model's switch
std::unique_ptr<llm::Model> load_split(const std::string& path, const std::vector<Device*>& devices) {
  llm::PlanRequest req;
  req.devices = devices;
  req.split = llm::SplitMode::Tensor;
  req.ctx_size = 256;
  llm::LoadOptions o;
  o.placement = llm::plan_memory(llm::describe_model(path), req).placement;
  return llm::Model::load(path, o);
}

// 12 sequences prefilled one by one (prompts of 9 to 12 tokens: rows that take the vendor GEMM), then 4 decode steps
// of all 12 in one batch, teacher-forced; every prefill's last logits and every decode row's.
std::vector<float> run(llm::Model& m) {
  std::vector<float> logits;
  const int vocab = m.config().vocab_size;
  constexpr int kSeqs = 12, kSteps = 4;
  llm::KvCache cache(m.kv_layout(), 64, 16);
  std::vector<llm::SequenceKv> seqs(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    const int len = 9 + s % 4;
    EXPECT_TRUE(seqs[(size_t)s].reserve(cache, len + kSteps));
    llm::ForwardBatch b;
    for (int i = 0; i < len; ++i) b.tokens.push_back((llm::TokenId)((i * 31 + 7 * s + 3) % vocab));
    b.seqs.push_back({&seqs[(size_t)s], len, len, false});
    const std::vector<float> row = m.forward(b, cache).to_vector<float>();
    logits.insert(logits.end(), row.begin(), row.end());
    seqs[(size_t)s].length = len;
  }
  for (int step = 0; step < kSteps; ++step) {
    llm::ForwardBatch b;
    for (int s = 0; s < kSeqs; ++s) {
      b.tokens.push_back((llm::TokenId)((step * 13 + s * 5 + 1) % vocab));
      b.seqs.push_back({&seqs[(size_t)s], 1, seqs[(size_t)s].length + 1, false});
    }
    const std::vector<float> rows = m.forward(b, cache).to_vector<float>();
    logits.insert(logits.end(), rows.begin(), rows.end());
    for (auto& s : seqs) ++s.length;
  }
  for (auto& s : seqs) s.release(cache);
  return logits;
}

void expect_switch_bit_identical(const std::vector<Device*>& devices, bool expect_fused) {
  const std::string path = test::random_model_file("tiny-llama", DType::F16, 99);
  SCOPED_TRACE(devices[0]->id() + ", " + devices[1]->id());
  std::vector<float> off, on;
  {
    test::ScopedEnv env("RBEE_TP_REDUCE_NORM", "0");
    const uint64_t before = fused_reduce_norms();
    auto m = load_split(path, devices);
    ASSERT_EQ(m->placement().split, llm::SplitMode::Tensor);
    off = run(*m);
    EXPECT_EQ(fused_reduce_norms(), before) << "the switch is off, but the fused pass ran";
  }
  {
    test::ScopedEnv env("RBEE_TP_REDUCE_NORM", "1");
    const uint64_t before = fused_reduce_norms();
    auto m = load_split(path, devices);
    on = run(*m);
    if (expect_fused) EXPECT_GT(fused_reduce_norms(), before) << "the switch is on, but the fused pass never ran";
    else EXPECT_EQ(fused_reduce_norms(), before) << "the host communicator has no fused pass";
  }
  ASSERT_EQ(off.size(), on.size());
  ASSERT_FALSE(off.empty());
  size_t differ = 0;
  for (size_t i = 0; i < off.size(); ++i) differ += std::memcmp(&off[i], &on[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "of " << off.size() << " logits";
}

TEST(ReduceNorm, SwitchBitIdenticalOnCpuRanks) {
  Registry& registry = Registry::global();
  expect_switch_bit_identical({&registry.select("cpu", 0), &registry.select("cpu", 3)}, false);
}

TEST(ReduceNorm, SwitchBitIdenticalOnGpuRanks) {
  Backend* gpu = test::two_gpu_backend();
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  expect_switch_bit_identical({&gpu->device(0), &gpu->device(1)}, true);
}

}  // namespace
}  // namespace rbee
