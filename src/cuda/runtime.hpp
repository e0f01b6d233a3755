// src/cuda/runtime.hpp — the little of the CUDA runtime the host side needs (no CUDA headers).
#pragma once

namespace attnkit::cuda {

// Number of visible CUDA devices; 0 when there is none, no driver, or the build has no CUDA.
int device_count();

// Multiprocessors of the current device, queried once per device and cached (launches call it).
int current_device_sm_count();

}  // namespace attnkit::cuda
