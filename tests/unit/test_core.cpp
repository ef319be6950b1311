// Core pieces: shapes and broadcasting, tensor views, errors, the caching allocator and the thread pool.
#include <atomic>
#include <numeric>

#include "common/harness.h"
#include "rbee/core/thread_pool.h"
#include "rbee/ops.h"

namespace rbee {
namespace {

TEST(Shape, BroadcastFollowsNumpy) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}), Shape({3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 3}), Shape({2, 3}));
  try {
    broadcast_shapes({3, 2}, {4, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
}

TEST(Shape, RankLimitIsAnError) {
  Shape s = Shape::filled(kMaxRank, 1);
  EXPECT_THROW(s.push_back(1), Error);
  EXPECT_THROW(s.at(kMaxRank), Error);
}

TEST(DType, GgufBlockSizes) {
  EXPECT_EQ(dtype_row_bytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 32), 34);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 256), 144);
  EXPECT_EQ(dtype_row_bytes(DType::Q6_K, 512), 420);
  EXPECT_EQ(dtype_row_bytes(DType::Q8_K, 256), 292);
  EXPECT_THROW(dtype_row_bytes(DType::Q4_K, 100), Error);
  EXPECT_EQ(dtype_from_ggml_type(12), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_FALSE(dtype_from_ggml_type(16).has_value());  // IQ2_XXS: not supported
}

TEST(Error, ContextChainsAndCategory) {
  try {
    try {
      RBEE_CHECK(false, "bad {}", 42);
    } catch (Error& e) {
      e.add_context("layer 3");
      throw;
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.message(), "bad 42");
    EXPECT_STREQ(e.what(), "InvalidArgument: bad 42 (while: layer 3)");
  }
}

TEST(Tensor, ViewsShareMemoryAndKeepValues) {
  Device& cpu = test::cpu_device();
  std::vector<float> v(24);
  std::iota(v.begin(), v.end(), 0.0f);
  const Tensor t = Tensor::from_vector(v, {2, 3, 4}, cpu);
  EXPECT_FALSE(t.is_view());
  const Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  EXPECT_TRUE(tr.is_view());
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.shape(), Shape({4, 3, 2}));
  const auto c = tr.contiguous().to_vector<float>();
  // element [k, j, i] of tr is t[i, j, k] = i*12 + j*4 + k
  EXPECT_EQ(c[(1 * 3 + 2) * 2 + 1], 1 * 12 + 2 * 4 + 1);
  const Tensor n = t.narrow(2, 1, 2).select(0, 1);  // [3, 2] = t[1, :, 1:3]
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{13, 14, 17, 18, 21, 22}));
  const Tensor e = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3, 1}, cpu).expand({2, 3, 4});
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.contiguous().to_vector<float>()[5], 2.0f);
  EXPECT_EQ(t.reshape({6, -1}).shape(), Shape({6, 4}));
  EXPECT_THROW(tr.view({24}), Error);
  EXPECT_EQ(tr.reshape({24}).to_vector<float>()[1], 12.0f);
  EXPECT_THROW(t.narrow(1, 2, 2), Error);
  EXPECT_THROW(t.expand({2, 4, 4}), Error);
  EXPECT_THROW(t.to_vector<int32_t>(), Error);
}

TEST(Tensor, QuantizedViewsKeepWholeBlocks) {
  Device& cpu = test::cpu_device();
  const Tensor q = Tensor::empty({4, 64}, DType::Q8_0, cpu);
  EXPECT_EQ(q.nbytes(), 4 * 2 * 34);
  EXPECT_EQ(static_cast<char*>(q.narrow(0, 1, 2).data()) - static_cast<char*>(q.data()), 68);
  EXPECT_EQ(static_cast<char*>(q.narrow(1, 32, 32).data()) - static_cast<char*>(q.data()), 34);
  EXPECT_THROW(q.narrow(1, 16, 32), Error);
  EXPECT_THROW(q.transpose(0, 1), Error);
}

TEST(CachingAllocator, ReusesFreedBlocks) {
  Device& cpu = test::cpu_device();
  const auto before = cpu.memory_stats();
  void* first;
  {
    auto b = cpu.allocate(100000);
    first = b->data();
  }
  auto b2 = cpu.allocate(99000);  // same bucket
  EXPECT_EQ(b2->data(), first);
  EXPECT_GE(cpu.memory_stats().raw_allocations, before.raw_allocations);
  EXPECT_EQ(CachingAllocator::round_size(5000), 5120u);
}

TEST(CachingAllocator, OutOfMemoryIsAnErrorNotACrash) {
  int calls = 0;
  CachingAllocator alloc("test", [&](size_t) -> void* { ++calls; return nullptr; }, [](void*) {});
  size_t rounded;
  try {
    alloc.allocate(1 << 20, &rounded);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
  }
  Device& cpu = test::cpu_device();
  EXPECT_THROW(Tensor::empty({int64_t(1) << 40, int64_t(1) << 20}, DType::F32, cpu), Error);
}

TEST(ThreadPool, RunsEveryTaskOnceAndPropagatesErrors) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.run(1000, [&](int64_t i) { hits[(size_t)i]++; });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10007, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 10007LL * 10006 / 2);
  EXPECT_THROW(pool.run(50, [&](int64_t i) { RBEE_CHECK(i != 17, "task {} failed", i); }), Error);
  // The pool still works after an error, and nested calls run inline.
  std::atomic<int> nested{0};
  pool.run(4, [&](int64_t) { pool.run(3, [&](int64_t) { nested++; }); });
  EXPECT_EQ(nested.load(), 12);
}

TEST(Ops, BadArgumentsGiveClearErrors) {
  Device& cpu = test::cpu_device();
  const Tensor a = ops::zeros({2, 3}, DType::F32, cpu);
  const Tensor b = ops::zeros({4, 3}, DType::F32, cpu);
  const Tensor i = ops::zeros({2, 3}, DType::I32, cpu);
  try {
    ops::add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::add(a, i), Error);                   // dtype mismatch
  EXPECT_THROW(ops::unary(UnaryOp::Exp, i), Error);      // float-only op on ints
  EXPECT_THROW(ops::where(a, a, a), Error);              // cond must be u8
  EXPECT_THROW(ops::add(a, Tensor()), Error);            // undefined tensor
  EXPECT_THROW(ops::arange(0, 1, -1, DType::F32, cpu), Error);
}

}  // namespace
}  // namespace rbee
