// src/cuda/gdn/api.hpp — the CUDA backend's gated delta rule entry points (params validated).
#pragma once
#include "attnkit/gdn.hpp"

namespace attnkit::cuda {

Status gdn_forward(const GdnFwdParams& p);  // chunked, scalar gate, K = V in {64, 128}
Status gdn_decode(const GdnDecodeParams& p);

}  // namespace attnkit::cuda
