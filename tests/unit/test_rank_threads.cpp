// RankThreads (src/llm/models/rank_threads.h), the tensor split's per-rank host threads, with the hand-over that
// sleeps on a condition variable (spin 0, CPU ranks) and the one that spins first (GPU ranks): every rank runs each
// step exactly once, run() returns only after every rank's part returned (its writes are visible to the caller),
// a rank's exception reaches the caller after on_error ran once, and the threads keep working after it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llm/models/rank_threads.h"

namespace rbee::llm {
namespace {

// Steps of `ranks` ranks, each writing its slot; the caller checks every slot after each run().
void check_steps(int ranks, int64_t spin_us, int steps, bool slow_rank) {
  RankThreads threads(ranks, spin_us);
  std::vector<int> seen((size_t)ranks, -1);  // plain ints: run() must order the ranks' writes before it returns
  const auto on_error = [](const std::string&) {};
  for (int step = 0; step < steps; ++step) {
    threads.run(
        [&](int r) {
          // A late rank (sleeping past the spin) must still be waited for.
          if (slow_rank && r == ranks - 1 && step % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          seen[(size_t)r] = step;
        },
        on_error);
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(seen[(size_t)r], step) << "rank " << r << " at step " << step;
  }
}

TEST(RankThreads, EveryRankRunsEachStepOnceSleeping) { check_steps(3, 0, 500, true); }

TEST(RankThreads, EveryRankRunsEachStepOnceSpinning) {
  check_steps(3, 2000, 2000, true);
  check_steps(2, 1, 500, true);  // the spin ends long before the late rank: the condition variable takes over
}

// A pause between steps longer than the spin: the workers fall asleep and must wake for the next step.
TEST(RankThreads, WakesAfterTheSpinRanOut) {
  RankThreads threads(2, 100);
  std::atomic<int> calls{0};
  for (int step = 0; step < 5; ++step) {
    threads.run([&](int) { calls.fetch_add(1); }, [](const std::string&) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(calls.load(), 10);
}

TEST(RankThreads, ARankErrorReachesTheCallerOnce) {
  for (int64_t spin : {0, 5000}) {
    RankThreads threads(3, spin);
    std::atomic<int> errors{0}, calls{0};
    EXPECT_THROW(threads.run(
                     [&](int r) {
                       calls.fetch_add(1);
                       if (r >= 1) throw std::runtime_error("rank failed");
                     },
                     [&](const std::string& why) {
                       EXPECT_EQ(why, "rank failed");
                       errors.fetch_add(1);
                     }),
                 std::runtime_error);
    EXPECT_EQ(errors.load(), 1) << "spin " << spin;
    EXPECT_EQ(calls.load(), 3) << "spin " << spin;
    // The threads still serve the next step.
    calls = 0;
    threads.run([&](int) { calls.fetch_add(1); }, [](const std::string&) {});
    EXPECT_EQ(calls.load(), 3) << "spin " << spin;
  }
}

}  // namespace
}  // namespace rbee::llm
