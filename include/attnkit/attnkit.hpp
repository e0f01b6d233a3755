// attnkit/attnkit.hpp — the whole torch-free public API.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/flex.hpp"
#include "attnkit/gdn.hpp"
#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {
// True when this build has CUDA kernels and a CUDA device is visible.
bool cuda_available();
const char* version();
}  // namespace attnkit
