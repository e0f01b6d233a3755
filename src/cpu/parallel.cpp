// src/cpu/parallel.cpp — thread count of the CPU backend.
#include "attnkit/cpu/parallel.hpp"

#include <cstdlib>
#include <thread>

namespace attnkit::cpu {

int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("ATTNKIT_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return n;
}

}  // namespace attnkit::cpu
