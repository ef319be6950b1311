// on_ranks: runs fn(rank) on one thread per rank, all at once (a collective needs every rank in flight), and fails
// the test with the rank's message if any rank threw.
#pragma once

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rbee::test {

template <class Fn>
void on_ranks(int ranks, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors((size_t)ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[(size_t)r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) ASSERT_EQ(errors[(size_t)r], "") << "rank " << r;
}

}  // namespace rbee::test
