// attnkit/cpu/parallel.hpp — a minimal parallel_for over independent work items.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace attnkit::cpu {

// Calls fn(i) for i in [0, n) on up to hardware_concurrency threads (ATTNKIT_NUM_THREADS
// overrides). Items are claimed dynamically, so results must not depend on which thread ran what.
int num_threads();

template <class Fn>
void parallel_for(int64_t n, Fn&& fn) {
  int64_t workers = std::min<int64_t>(n, num_threads());
  if (workers <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto loop = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(loop);
  loop();
  for (auto& t : pool) t.join();
}

}  // namespace attnkit::cpu
