// on_ranks: runs fn(rank) on one thread per rank, all at once (run_on_ranks), and fails the test with the rank's
// message if any rank threw.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/rank_threads.h"

namespace rbee::test {

template <class Fn>
void on_ranks(int ranks, Fn fn) {
  const std::vector<std::string> errors = run_on_ranks(ranks, fn);
  for (int r = 0; r < ranks; ++r) ASSERT_EQ(errors[(size_t)r], "") << "rank " << r;
}

}  // namespace rbee::test
