// Runs fn(rank) on one thread per rank, all at once (a collective needs every rank in flight), and returns each
// rank's error message ("" where it returned normally). tests/common/on_ranks.h fails a test with it,
// bench/gpu/bench_ranks.h throws it.
#pragma once

#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace rbee::test {

template <class Fn>
std::vector<std::string> run_on_ranks(int ranks, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors((size_t)ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[(size_t)r] = e.what();
        if (errors[(size_t)r].empty()) errors[(size_t)r] = "an exception with no message";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace rbee::test
