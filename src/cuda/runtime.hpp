// src/cuda/runtime.hpp — the little of the CUDA runtime the host side needs (no CUDA headers).
#pragma once

namespace attnkit::cuda {

// Number of visible CUDA devices; 0 when there is none, no driver, or the build has no CUDA.
int device_count();

// Multiprocessors of the current device, queried once per device and cached (launches call it).
int current_device_sm_count();

// Peak DRAM bandwidth of the current device in TB/s (2 x memory clock x bus width), cached as the
// SM count; 0 when unknown. Launch rules tuned per memory system read it (an H100 SXM gives 3.35,
// an H200 4.9).
double current_device_dram_tbps();

// The launch rules' split between the two Hopper memory systems we tune on: at least 4 TB/s (H200)
// against less (H100).
inline bool current_device_fast_dram() { return current_device_dram_tbps() >= 4.0; }

}  // namespace attnkit::cuda
