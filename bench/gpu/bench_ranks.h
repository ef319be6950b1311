// on_ranks for the multi-GPU benches: fn(rank) on one thread per rank, all at once (a collective needs every rank in
// flight); rethrows the first failing rank's error as std::runtime_error naming the rank.
#pragma once

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace bench {

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
  for (int r = 0; r < ranks; ++r) {
    if (!errors[(size_t)r].empty()) throw std::runtime_error(fmt::format("rank {}: {}", r, errors[(size_t)r]));
  }
}

}  // namespace bench
