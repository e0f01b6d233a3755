// src/cuda/runtime.hpp — the little of the CUDA runtime the host side needs (no CUDA headers).
#pragma once

namespace attnkit::cuda {

// Number of visible CUDA devices; 0 when there is none, no driver, or the build has no CUDA.
int device_count();

}  // namespace attnkit::cuda
