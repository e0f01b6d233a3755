// src/cuda/runtime_stub.cpp — device_count() for builds without CUDA.
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
int device_count() { return 0; }
}  // namespace attnkit::cuda
