// on_ranks for the multi-GPU benches: fn(rank) on one thread per rank, all at once (tests/common/rank_threads.h);
// rethrows the first failing rank's error as std::runtime_error naming the rank.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/rank_threads.h"

namespace bench {

template <class Fn>
void on_ranks(int ranks, Fn fn) {
  const std::vector<std::string> errors = rbee::test::run_on_ranks(ranks, fn);
  for (int r = 0; r < ranks; ++r) {
    if (!errors[(size_t)r].empty()) throw std::runtime_error(fmt::format("rank {}: {}", r, errors[(size_t)r]));
  }
}

}  // namespace bench
